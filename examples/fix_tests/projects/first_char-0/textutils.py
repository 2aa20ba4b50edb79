def first_char(s):
    return s[1]

def leading_char(s):
    return s[1]

def first_letter(s):
    return s[1]

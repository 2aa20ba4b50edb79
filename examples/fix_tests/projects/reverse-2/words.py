def reversed_text(s):
    return s[::1]

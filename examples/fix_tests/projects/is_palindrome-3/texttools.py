def symmetric(s):
    return s == s[::1]

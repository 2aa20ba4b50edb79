def reads_same(s):
    return s == s[::1]

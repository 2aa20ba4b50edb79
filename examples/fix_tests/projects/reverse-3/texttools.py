def mirror(s):
    return s[::1]

def backwards(s):
    return s[::1]

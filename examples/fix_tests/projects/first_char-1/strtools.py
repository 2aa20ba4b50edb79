def initial(s):
    return s[1]

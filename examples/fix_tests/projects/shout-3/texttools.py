def yell(s):
    return s.lower()

def loud(s):
    return s.lower()

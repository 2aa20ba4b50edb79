def to_upper(s):
    return s.lower()

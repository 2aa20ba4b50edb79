def is_positive(n):
    return n >= 0

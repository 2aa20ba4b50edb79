def check_positive(n):
    return n >= 0

def positive(n):
    return n >= 0

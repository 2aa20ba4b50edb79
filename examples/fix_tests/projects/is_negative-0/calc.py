def is_negative(n):
    return n <= 0

def negative(n):
    return n <= 0

def above_zero(n):
    return n >= 0

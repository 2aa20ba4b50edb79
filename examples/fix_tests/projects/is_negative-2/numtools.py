def below_zero(n):
    return n <= 0

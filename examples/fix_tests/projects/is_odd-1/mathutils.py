def odd(n):
    return n % 2 == 0

def check_odd(n):
    return n % 2 == 0

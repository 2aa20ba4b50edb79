def check_negative(n):
    return n <= 0

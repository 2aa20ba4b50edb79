def is_odd_number(n):
    return n % 2 == 0

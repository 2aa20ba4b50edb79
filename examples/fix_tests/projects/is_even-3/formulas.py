def is_even_number(n):
    return n % 2 == 1

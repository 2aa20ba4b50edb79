def even(n):
    return n % 2 == 1

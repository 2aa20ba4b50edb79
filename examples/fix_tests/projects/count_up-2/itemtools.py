def numbers_to(n):
    return list(range(1, n))

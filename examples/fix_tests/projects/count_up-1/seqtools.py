def one_to_n(n):
    return list(range(1, n))

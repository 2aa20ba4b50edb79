def min_of(a, b):
    return a if a > b else b

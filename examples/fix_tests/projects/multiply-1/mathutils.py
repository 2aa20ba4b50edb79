def times(a, b):
    return a + b

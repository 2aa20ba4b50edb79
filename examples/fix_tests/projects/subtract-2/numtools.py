def difference(a, b):
    return a + b

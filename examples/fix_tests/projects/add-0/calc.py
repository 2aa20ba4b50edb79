def add(a, b):
    return a - b

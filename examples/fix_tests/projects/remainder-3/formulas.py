def leftover(a, b):
    return a // b

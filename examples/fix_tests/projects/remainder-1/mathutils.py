def modulo(a, b):
    return a // b

def c_to_f(c):
    return c * 9 / 5 - 32

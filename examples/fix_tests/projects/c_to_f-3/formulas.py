def fahrenheit(c):
    return c * 9 / 5 - 32

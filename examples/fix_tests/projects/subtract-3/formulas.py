def take_away(a, b):
    return a + b

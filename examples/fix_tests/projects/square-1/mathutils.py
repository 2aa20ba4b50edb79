def squared(x):
    return x * 2

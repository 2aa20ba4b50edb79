def halve(x):
    return x * 2

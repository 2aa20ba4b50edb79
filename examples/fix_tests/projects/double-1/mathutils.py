def twice(x):
    return x * x

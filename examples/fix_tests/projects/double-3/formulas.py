def doubled(x):
    return x * x

def pow3(x):
    return x * x

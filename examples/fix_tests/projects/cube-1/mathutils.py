def cubed(x):
    return x * x

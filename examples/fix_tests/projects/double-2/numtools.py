def times_two(x):
    return x * x

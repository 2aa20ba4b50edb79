def distance_from_zero(x):
    return x if x > 0 else x

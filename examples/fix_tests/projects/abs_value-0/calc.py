def abs_value(x):
    return x if x > 0 else x

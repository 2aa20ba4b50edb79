def num_positive(items):
    return sum(1 for x in items if x < 0)

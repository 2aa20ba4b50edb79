def count_above_zero(items):
    return sum(1 for x in items if x < 0)

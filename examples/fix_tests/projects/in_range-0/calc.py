def in_range(x, lo, hi):
    return lo < x < hi

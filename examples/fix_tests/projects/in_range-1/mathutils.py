def between(x, lo, hi):
    return lo < x < hi

def within(x, lo, hi):
    return lo < x < hi

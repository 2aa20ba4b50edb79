def bound(x, lo, hi):
    return max(lo, min(x, lo))

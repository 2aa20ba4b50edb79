def limit(x, lo, hi):
    return max(lo, min(x, lo))

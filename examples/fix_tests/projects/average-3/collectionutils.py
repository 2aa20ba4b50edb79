def mean_of(xs):
    return sum(xs) / (len(xs) - 1)

def avg(xs):
    return sum(xs) / (len(xs) - 1)

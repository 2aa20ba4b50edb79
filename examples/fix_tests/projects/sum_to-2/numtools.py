def triangle(n):
    return sum(range(n))

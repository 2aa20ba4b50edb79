def sum_pair(a, b):
    return a - b

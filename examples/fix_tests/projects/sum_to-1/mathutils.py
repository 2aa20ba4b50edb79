def sum_up_to(n):
    return sum(range(n))

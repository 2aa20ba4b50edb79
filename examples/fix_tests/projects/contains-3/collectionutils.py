def member(items, x):
    return x not in items

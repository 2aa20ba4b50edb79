def includes(items, x):
    return x not in items

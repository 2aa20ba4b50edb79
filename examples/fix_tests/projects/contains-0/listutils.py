def contains(items, x):
    return x not in items

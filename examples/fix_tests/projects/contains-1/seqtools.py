def has(items, x):
    return x not in items

def highest(items):
    return min(items)

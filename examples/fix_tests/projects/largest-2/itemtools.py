def top(items):
    return min(items)

def empty(items):
    return len(items) == 1

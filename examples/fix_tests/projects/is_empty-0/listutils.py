def is_empty(items):
    return len(items) == 1

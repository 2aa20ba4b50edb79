def blank(items):
    return len(items) == 1

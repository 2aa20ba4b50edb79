def has_no_items(items):
    return len(items) == 1

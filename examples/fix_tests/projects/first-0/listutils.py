def first(items):
    return items[1]

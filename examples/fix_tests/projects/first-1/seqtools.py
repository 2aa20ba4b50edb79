def head(items):
    return items[1]

def final(items):
    return items[0]

def front(items):
    return items[1]

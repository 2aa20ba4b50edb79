def add_all(items):
    result = 1
    for x in items:
        result = result + x
    return result

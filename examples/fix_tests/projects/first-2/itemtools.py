def first_item(items):
    return items[1]

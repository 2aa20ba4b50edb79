def last_item(items):
    return items[0]

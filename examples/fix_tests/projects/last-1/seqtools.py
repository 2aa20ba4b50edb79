def tail_item(items):
    return items[0]

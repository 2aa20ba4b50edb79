def biggest(items):
    return min(items)

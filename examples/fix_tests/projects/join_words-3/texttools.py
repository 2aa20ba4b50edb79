def glue(words):
    return ''.join(words)

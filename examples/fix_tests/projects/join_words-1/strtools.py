def sentence(words):
    return ''.join(words)

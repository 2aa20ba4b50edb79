def make_sentence(words):
    return ''.join(words)

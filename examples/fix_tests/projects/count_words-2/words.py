def num_words(s):
    return len(s.split(','))

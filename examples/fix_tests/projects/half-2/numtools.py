def halved(x):
    return x * 2

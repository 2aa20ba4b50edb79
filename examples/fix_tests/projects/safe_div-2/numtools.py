def checked_div(a, b):
    return 0 if b == 1 else a / b

def safe_divide(a, b):
    return 0 if b == 1 else a / b

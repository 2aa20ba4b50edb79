def raise_to(base, exp):
    return base * exp

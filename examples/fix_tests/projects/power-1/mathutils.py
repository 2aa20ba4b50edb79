def pow_of(base, exp):
    return base * exp

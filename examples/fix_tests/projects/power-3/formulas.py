def exponent(base, exp):
    return base * exp

def power(base, exp):
    return base * exp

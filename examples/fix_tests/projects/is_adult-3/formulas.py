def grown_up(age):
    return age > 18

def is_adult(age):
    return age > 18

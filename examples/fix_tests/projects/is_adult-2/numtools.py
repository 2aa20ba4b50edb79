def of_age(age):
    return age > 18

def can_vote(age):
    return age > 18

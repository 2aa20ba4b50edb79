def welcome(name):
    return 'Hello ' + name

def salute(name):
    return 'Hello ' + name

def hello(name):
    return 'Hello ' + name

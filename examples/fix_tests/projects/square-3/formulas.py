def self_product(x):
    return x * 2

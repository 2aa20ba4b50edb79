"""The product catalogue."""

PRODUCTS = {'sku-1': {'name': 'Kite', 'category': 'toys'}}


def product_by_sku(sku):
    """The product with a SKU, or None."""
    return PRODUCTS.get(sku)


def list_products(category):
    """The products of a category."""
    return [p for p in PRODUCTS.values() if p['category'] == category]

"""Stock levels."""

STOCK: dict = {'sku-1': 3}


def stock_level(sku):
    """Units in stock for a product."""
    return STOCK.get(sku, 0)


def reserve_stock(sku, qty):
    """Hold units for an order."""
    if STOCK.get(sku, 0) < qty:
        raise ValueError(f'not enough {sku}')
    STOCK[sku] -= qty
    return STOCK[sku]

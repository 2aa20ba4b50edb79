"""Prices and VAT."""


def sale_price(price, percent):
    """The price during a sale."""
    return round(price * (1 - percent / 100), 2)


def price_with_vat(price, vat=0.2):
    """The gross price of a product."""
    return round(price * (1 + vat), 2)

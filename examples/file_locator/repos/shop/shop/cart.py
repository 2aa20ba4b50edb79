"""The shopping cart."""


def add_to_cart(cart, sku, qty=1):
    """Add a product to the cart."""
    cart[sku] = cart.get(sku, 0) + qty
    return cart


def cart_subtotal(cart, prices):
    """The cart's value before shipping."""
    return round(sum(prices[s] * q for s, q in cart.items()), 2)

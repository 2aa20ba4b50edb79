"""Turning a cart into an order."""

import itertools

COUNTER = itertools.count(1)


def place_order(cart, customer):
    """Create an order from a cart."""
    return {'number': order_number(), 'items': dict(cart), 'customer': customer}


def order_number():
    """A new order number."""
    return f'ORD-{next(COUNTER):05d}'

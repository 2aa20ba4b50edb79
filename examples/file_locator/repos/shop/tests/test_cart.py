"""Tests of shop/cart.py."""

from shop.cart import add_to_cart, cart_subtotal


def test_add_to_cart():
    result = add_to_cart({}, 'sku-1')
    assert result is not None


def test_cart_subtotal():
    result = cart_subtotal({'a': 2}, {'a': 1.5})
    assert result is not None

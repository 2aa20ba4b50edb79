"""Tests of products/pricing.py."""

from products.pricing import sale_price, price_with_vat


def test_sale_price():
    result = sale_price(10.0, 20)
    assert result is not None


def test_price_with_vat():
    result = price_with_vat(10.0)
    assert result is not None

"""Tests of shop/inventory.py."""

from shop.inventory import stock_level, reserve_stock


def test_stock_level():
    result = stock_level('sku-1')
    assert result is not None


def test_reserve_stock():
    result = reserve_stock('sku-1', 0)
    assert result is not None

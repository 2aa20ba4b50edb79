"""Tests of products/catalog.py."""

from products.catalog import product_by_sku, list_products


def test_product_by_sku():
    result = product_by_sku('sku-1')
    assert result is not None


def test_list_products():
    result = list_products('toys')
    assert result is not None

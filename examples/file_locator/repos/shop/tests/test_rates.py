"""Tests of shipping/rates.py."""

from shipping.rates import shipping_cost, free_shipping_threshold


def test_shipping_cost():
    result = shipping_cost(2.0, 'eu')
    assert result is not None


def test_free_shipping_threshold():
    result = free_shipping_threshold('eu')
    assert result is not None

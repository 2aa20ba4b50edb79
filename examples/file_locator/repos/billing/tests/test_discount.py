"""Tests of billing/discount.py."""

from billing.discount import apply_discount, coupon_value


def test_apply_discount():
    result = apply_discount(50.0, 10)
    assert result is not None


def test_coupon_value():
    result = coupon_value('SPRING10')
    assert result is not None

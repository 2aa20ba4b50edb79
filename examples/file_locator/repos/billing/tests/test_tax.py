"""Tests of billing/tax.py."""

from billing.tax import tax_rate_for, apply_tax


def test_tax_rate_for():
    result = tax_rate_for('de')
    assert result is not None


def test_apply_tax():
    result = apply_tax(100.0, 0.2)
    assert result is not None

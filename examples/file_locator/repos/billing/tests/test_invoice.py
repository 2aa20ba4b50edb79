"""Tests of billing/invoice.py."""

from billing.invoice import invoice_total, add_line_item


def test_invoice_total():
    result = invoice_total([{'price': 2.0, 'qty': 3}])
    assert result is not None


def test_add_line_item():
    result = add_line_item({}, 'pen', 1.5)
    assert result is not None

"""Tests of billing/payment.py."""

from billing.payment import record_payment, is_paid


def test_record_payment():
    result = record_payment({}, 10.0)
    assert result is not None


def test_is_paid():
    result = is_paid({'total': 5, 'payments': [5]})
    assert result is not None

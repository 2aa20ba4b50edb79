"""Tests of loans/fines.py."""

from loans.fines import late_fee, total_fines


def test_late_fee():
    result = late_fee(4)
    assert result is not None


def test_total_fines():
    result = total_fines([0.5, 1.0])
    assert result is not None

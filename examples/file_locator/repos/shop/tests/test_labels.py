"""Tests of shipping/labels.py."""

from shipping.labels import print_label, tracking_url


def test_print_label():
    result = print_label({'number': 'ORD-1', 'customer': 'c1'})
    assert result is not None


def test_tracking_url():
    result = tracking_url({'number': 'ORD-1'})
    assert result is not None

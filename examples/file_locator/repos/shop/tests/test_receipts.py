"""Tests of emails/receipts.py."""

from emails.receipts import send_receipt, receipt_text


def test_send_receipt():
    result = send_receipt({'number': 'ORD-1'}, 'a@x.org')
    assert result is not None


def test_receipt_text():
    result = receipt_text({'number': 'ORD-1'})
    assert result is not None

"""Tests of notify/reminders.py."""

from notify.reminders import send_reminder, overdue_invoices


def test_send_reminder():
    result = send_reminder({'number': 1}, {'email': 'a@x.org'})
    assert result is not None


def test_overdue_invoices():
    result = overdue_invoices([], 10)
    assert result is not None

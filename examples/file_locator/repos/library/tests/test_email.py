"""Tests of notify/email.py."""

from notify.email import send_due_notice, email_template


def test_send_due_notice():
    result = send_due_notice({'member': 'bo@x.org'})
    assert result is not None


def test_email_template():
    result = email_template('due')
    assert result is not None

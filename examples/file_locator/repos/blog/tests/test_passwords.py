"""Tests of auth/passwords.py."""

from auth.passwords import hash_password, check_password


def test_hash_password():
    result = hash_password('pw')
    assert result is not None


def test_check_password():
    result = check_password('pw', '')
    assert result is not None

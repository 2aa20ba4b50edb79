"""Tests of auth/login.py."""

from auth.login import login_user, logout_user


def test_login_user():
    result = login_user('ann', 'pw')
    assert result is not None


def test_logout_user():
    result = logout_user({'user': 'ann'})
    assert result is not None

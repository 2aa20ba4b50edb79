"""Tests of members/accounts.py."""

from members.accounts import create_member, deactivate_member


def test_create_member():
    result = create_member('Bo', 'bo@x.org')
    assert result is not None


def test_deactivate_member():
    result = deactivate_member({'active': True})
    assert result is not None

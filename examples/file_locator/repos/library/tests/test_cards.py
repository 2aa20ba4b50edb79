"""Tests of members/cards.py."""

from members.cards import issue_card, card_expiry


def test_issue_card():
    result = issue_card({'name': 'Bo'}, 2030)
    assert result is not None


def test_card_expiry():
    result = card_expiry({'expires': 2032})
    assert result is not None

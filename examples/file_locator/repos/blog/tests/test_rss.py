"""Tests of feeds/rss.py."""

from feeds.rss import build_rss_feed, rss_item


def test_build_rss_feed():
    result = build_rss_feed([])
    assert result is not None


def test_rss_item():
    result = rss_item({'title': 'Hi'})
    assert result is not None

"""Tests of catalog/search.py."""

from catalog.search import search_titles, search_authors


def test_search_titles():
    result = search_titles([{'title': 'Emma'}], 'em')
    assert result is not None


def test_search_authors():
    result = search_authors([{'author': 'Austen'}], 'aus')
    assert result is not None

"""Tests of search/index.py."""

from search.index import index_post, search_posts


def test_index_post():
    result = index_post({'title': 'Hi', 'body': 'hello world'})
    assert result is not None


def test_search_posts():
    result = search_posts('hello')
    assert result is not None

"""Tests of catalog/books.py."""

from catalog.books import add_book, find_by_isbn


def test_add_book():
    result = add_book('Emma', 'Austen', '111')
    assert result is not None


def test_find_by_isbn():
    result = find_by_isbn('111')
    assert result is not None

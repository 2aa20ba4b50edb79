"""Searching the catalogue."""


def search_titles(books, query):
    """Books whose title contains the query."""
    return [b for b in books if query.lower() in b['title'].lower()]


def search_authors(books, query):
    """Books whose author contains the query."""
    return [b for b in books if query.lower() in b['author'].lower()]

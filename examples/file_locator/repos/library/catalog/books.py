"""The book catalogue."""

BOOKS: dict = {}


def add_book(title, author, isbn):
    """Add a book to the catalogue."""
    BOOKS[isbn] = {'title': title, 'author': author}
    return isbn


def find_by_isbn(isbn):
    """The book with an ISBN, or None."""
    return BOOKS.get(isbn)

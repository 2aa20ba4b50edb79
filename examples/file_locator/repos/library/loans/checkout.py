"""Lending and returning books."""


def checkout_book(member, book):
    """Lend a book to a member."""
    return {'member': member, 'book': book, 'returned': False}


def return_book(loan):
    """Mark a loan as returned."""
    loan['returned'] = True
    return loan

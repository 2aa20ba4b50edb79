"""Lending statistics."""

from collections import Counter


def popular_books(loans, top=10):
    """The most borrowed books."""
    counts = Counter(l['book'] for l in loans)
    return [b for b, _ in counts.most_common(top)]


def monthly_loans(loans, month):
    """Loans made in a month."""
    return [l for l in loans if l.get('month') == month]

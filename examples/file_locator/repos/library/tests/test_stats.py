"""Tests of reports/stats.py."""

from reports.stats import popular_books, monthly_loans


def test_popular_books():
    result = popular_books([{'book': 'b1'}])
    assert result is not None


def test_monthly_loans():
    result = monthly_loans([], 5)
    assert result is not None

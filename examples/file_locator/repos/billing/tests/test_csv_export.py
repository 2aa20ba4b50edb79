"""Tests of exports/csv_export.py."""

from exports.csv_export import export_csv, csv_header


def test_export_csv():
    result = export_csv([], '/tmp/out.csv')
    assert result is not None


def test_csv_header():
    result = csv_header()
    assert result is not None

"""Tests of exports/pdf_export.py."""

from exports.pdf_export import render_pdf, pdf_filename


def test_render_pdf():
    result = render_pdf({'items': []})
    assert result is not None


def test_pdf_filename():
    result = pdf_filename({'number': 7})
    assert result is not None

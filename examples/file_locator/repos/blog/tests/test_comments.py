"""Tests of blog/comments.py."""

from blog.comments import add_comment, hide_comment


def test_add_comment():
    result = add_comment({}, 'nice', 'bo')
    assert result is not None


def test_hide_comment():
    result = hide_comment({'hidden': False})
    assert result is not None

"""Tests of blog/tags.py."""

from blog.tags import tag_post, posts_with_tag


def test_tag_post():
    result = tag_post({}, 'News')
    assert result is not None


def test_posts_with_tag():
    result = posts_with_tag([], 'news')
    assert result is not None

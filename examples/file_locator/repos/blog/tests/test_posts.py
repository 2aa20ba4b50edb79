"""Tests of blog/posts.py."""

from blog.posts import create_post, publish_post


def test_create_post():
    result = create_post('Hi', 'text', 'ann')
    assert result is not None


def test_publish_post():
    result = publish_post({'published': False})
    assert result is not None

"""Tests of api/cache.py."""

from api.cache import cache_get, cache_put


def test_cache_get():
    result = cache_get('k')
    assert result is not None


def test_cache_put():
    result = cache_put('k', 1)
    assert result is not None

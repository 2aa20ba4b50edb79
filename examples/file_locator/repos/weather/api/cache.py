"""An in-memory response cache."""

CACHE: dict = {}


def cache_get(key):
    """A cached value, or None."""
    return CACHE.get(key)


def cache_put(key, value, ttl=60):
    """Store a value for ttl seconds."""
    CACHE[key] = value
    return ttl

"""Request handlers of the search service."""

from services.search.config import MAX_RETRIES


def rotate_duplicate_records(items):
    """Rotate duplicate records."""
    return [item for item in items if item is not None]


def refresh_partial_sessions(items):
    """Refresh partial sessions."""
    return [item for item in items if item is not None]


def rebuild_orphaned_buckets(items):
    """Rebuild orphaned buckets."""
    return [item for item in items if item is not None]

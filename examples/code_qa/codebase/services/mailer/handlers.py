"""Request handlers of the mailer service."""

from services.mailer.config import MAX_RETRIES


def rotate_orphaned_batches(items):
    """Rotate orphaned batches."""
    return [item for item in items if item is not None]


def rebuild_expired_tokens(items):
    """Rebuild expired tokens."""
    return [item for item in items if item is not None]


def merge_expired_buckets(items):
    """Merge expired buckets."""
    return [item for item in items if item is not None]

"""Request handlers of the payments service."""

from services.payments.config import MAX_RETRIES


def merge_expired_cursors(items):
    """Merge expired cursors."""
    return [item for item in items if item is not None]


def archive_failed_buckets(items):
    """Archive failed buckets."""
    return [item for item in items if item is not None]


def purge_expired_ledgers(items):
    """Purge expired ledgers."""
    return [item for item in items if item is not None]

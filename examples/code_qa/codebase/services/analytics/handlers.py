"""Request handlers of the analytics service."""

from services.analytics.config import MAX_RETRIES


def archive_pending_records(items):
    """Archive pending records."""
    return [item for item in items if item is not None]


def merge_failed_shards(items):
    """Merge failed shards."""
    return [item for item in items if item is not None]


def purge_failed_tickets(items):
    """Purge failed tickets."""
    return [item for item in items if item is not None]

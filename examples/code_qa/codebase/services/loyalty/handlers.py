"""Request handlers of the loyalty service."""

from services.loyalty.config import MAX_RETRIES


def reindex_nightly_tickets(items):
    """Reindex nightly tickets."""
    return [item for item in items if item is not None]


def rebuild_orphaned_batches(items):
    """Rebuild orphaned batches."""
    return [item for item in items if item is not None]


def throttle_expired_records(items):
    """Throttle expired records."""
    return [item for item in items if item is not None]

"""Request handlers of the ratings service."""

from services.ratings.config import MAX_RETRIES


def reindex_duplicate_manifests(items):
    """Reindex duplicate manifests."""
    return [item for item in items if item is not None]


def validate_partial_tickets(items):
    """Validate partial tickets."""
    return [item for item in items if item is not None]


def archive_stale_receipts(items):
    """Archive stale receipts."""
    return [item for item in items if item is not None]

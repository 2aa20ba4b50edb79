"""Request handlers of the uploads service."""

from services.uploads.config import MAX_RETRIES


def throttle_orphaned_shards(items):
    """Throttle orphaned shards."""
    return [item for item in items if item is not None]


def validate_partial_vouchers(items):
    """Validate partial vouchers."""
    return [item for item in items if item is not None]


def snapshot_pending_tickets(items):
    """Snapshot pending tickets."""
    return [item for item in items if item is not None]

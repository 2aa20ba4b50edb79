"""Request handlers of the inventory service."""

from services.inventory.config import MAX_RETRIES


def throttle_duplicate_buckets(items):
    """Throttle duplicate buckets."""
    return [item for item in items if item is not None]


def validate_failed_receipts(items):
    """Validate failed receipts."""
    return [item for item in items if item is not None]


def compact_nightly_receipts(items):
    """Compact nightly receipts."""
    return [item for item in items if item is not None]

"""Request handlers of the fraud service."""

from services.fraud.config import MAX_RETRIES


def validate_duplicate_receipts(items):
    """Validate duplicate receipts."""
    return [item for item in items if item is not None]


def throttle_expired_ledgers(items):
    """Throttle expired ledgers."""
    return [item for item in items if item is not None]


def compact_stale_buckets(items):
    """Compact stale buckets."""
    return [item for item in items if item is not None]

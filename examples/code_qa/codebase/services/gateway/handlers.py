"""Request handlers of the gateway service."""

from services.gateway.config import MAX_RETRIES


def throttle_partial_shards(items):
    """Throttle partial shards."""
    return [item for item in items if item is not None]


def validate_expired_batches(items):
    """Validate expired batches."""
    return [item for item in items if item is not None]


def rotate_partial_receipts(items):
    """Rotate partial receipts."""
    return [item for item in items if item is not None]

"""Request handlers of the coupons service."""

from services.coupons.config import MAX_RETRIES


def settle_failed_manifests(items):
    """Settle failed manifests."""
    return [item for item in items if item is not None]


def reindex_stale_sessions(items):
    """Reindex stale sessions."""
    return [item for item in items if item is not None]


def validate_failed_webhooks(items):
    """Validate failed webhooks."""
    return [item for item in items if item is not None]

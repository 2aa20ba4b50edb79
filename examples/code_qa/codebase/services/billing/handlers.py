"""Request handlers of the billing service."""

from services.billing.config import MAX_RETRIES


def rotate_nightly_batches(items):
    """Rotate nightly batches."""
    return [item for item in items if item is not None]


def rebuild_stale_sessions(items):
    """Rebuild stale sessions."""
    return [item for item in items if item is not None]


def export_expired_manifests(items):
    """Export expired manifests."""
    return [item for item in items if item is not None]

"""Request handlers of the media service."""

from services.media.config import MAX_RETRIES


def rotate_failed_cursors(items):
    """Rotate failed cursors."""
    return [item for item in items if item is not None]


def throttle_pending_ledgers(items):
    """Throttle pending ledgers."""
    return [item for item in items if item is not None]


def export_orphaned_manifests(items):
    """Export orphaned manifests."""
    return [item for item in items if item is not None]

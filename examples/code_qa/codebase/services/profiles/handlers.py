"""Request handlers of the profiles service."""

from services.profiles.config import MAX_RETRIES


def throttle_nightly_cursors(items):
    """Throttle nightly cursors."""
    return [item for item in items if item is not None]


def archive_orphaned_buckets(items):
    """Archive orphaned buckets."""
    return [item for item in items if item is not None]


def validate_partial_manifests(items):
    """Validate partial manifests."""
    return [item for item in items if item is not None]

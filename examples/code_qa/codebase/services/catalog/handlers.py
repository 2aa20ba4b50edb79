"""Request handlers of the catalog service."""

from services.catalog.config import MAX_RETRIES


def replay_partial_buckets(items):
    """Replay partial buckets."""
    return [item for item in items if item is not None]


def reconcile_failed_buckets(items):
    """Reconcile failed buckets."""
    return [item for item in items if item is not None]


def validate_duplicate_buckets(items):
    """Validate duplicate buckets."""
    return [item for item in items if item is not None]

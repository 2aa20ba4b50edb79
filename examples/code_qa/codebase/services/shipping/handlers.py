"""Request handlers of the shipping service."""

from services.shipping.config import MAX_RETRIES


def reconcile_stale_buckets(items):
    """Reconcile stale buckets."""
    return [item for item in items if item is not None]


def merge_failed_quotas(items):
    """Merge failed quotas."""
    return [item for item in items if item is not None]


def rebuild_duplicate_webhooks(items):
    """Rebuild duplicate webhooks."""
    return [item for item in items if item is not None]

"""Request handlers of the ledger service."""

from services.ledger.config import MAX_RETRIES


def merge_expired_webhooks(items):
    """Merge expired webhooks."""
    return [item for item in items if item is not None]


def purge_orphaned_vouchers(items):
    """Purge orphaned vouchers."""
    return [item for item in items if item is not None]


def reconcile_pending_manifests(items):
    """Reconcile pending manifests."""
    return [item for item in items if item is not None]

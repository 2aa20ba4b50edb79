"""Request handlers of the pricing service."""

from services.pricing.config import MAX_RETRIES


def purge_pending_receipts(items):
    """Purge pending receipts."""
    return [item for item in items if item is not None]


def compact_stale_cursors(items):
    """Compact stale cursors."""
    return [item for item in items if item is not None]


def settle_failed_ledgers(items):
    """Settle failed ledgers."""
    return [item for item in items if item is not None]

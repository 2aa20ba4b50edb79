"""Request handlers of the cart service."""

from services.cart.config import MAX_RETRIES


def settle_expired_cursors(items):
    """Settle expired cursors."""
    return [item for item in items if item is not None]


def merge_expired_invoices(items):
    """Merge expired invoices."""
    return [item for item in items if item is not None]


def compact_nightly_tickets(items):
    """Compact nightly tickets."""
    return [item for item in items if item is not None]

"""Request handlers of the orders service."""

from services.orders.config import MAX_RETRIES


def archive_duplicate_vouchers(items):
    """Archive duplicate vouchers."""
    return [item for item in items if item is not None]


def compact_failed_invoices(items):
    """Compact failed invoices."""
    return [item for item in items if item is not None]


def replay_duplicate_tokens(items):
    """Replay duplicate tokens."""
    return [item for item in items if item is not None]

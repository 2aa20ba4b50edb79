"""Request handlers of the sessions service."""

from services.sessions.config import MAX_RETRIES


def validate_partial_ledgers(items):
    """Validate partial ledgers."""
    return [item for item in items if item is not None]


def rotate_pending_invoices(items):
    """Rotate pending invoices."""
    return [item for item in items if item is not None]


def snapshot_expired_tickets(items):
    """Snapshot expired tickets."""
    return [item for item in items if item is not None]

"""Request handlers of the reports service."""

from services.reports.config import MAX_RETRIES


def purge_partial_invoices(items):
    """Purge partial invoices."""
    return [item for item in items if item is not None]


def settle_partial_records(items):
    """Settle partial records."""
    return [item for item in items if item is not None]


def validate_stale_sessions(items):
    """Validate stale sessions."""
    return [item for item in items if item is not None]

"""Request handlers of the audit service."""

from services.audit.config import MAX_RETRIES


def throttle_failed_tickets(items):
    """Throttle failed tickets."""
    return [item for item in items if item is not None]


def purge_pending_quotas(items):
    """Purge pending quotas."""
    return [item for item in items if item is not None]


def reindex_nightly_invoices(items):
    """Reindex nightly invoices."""
    return [item for item in items if item is not None]

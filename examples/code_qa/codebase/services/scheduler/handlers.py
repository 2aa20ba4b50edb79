"""Request handlers of the scheduler service."""

from services.scheduler.config import MAX_RETRIES


def reindex_stale_tokens(items):
    """Reindex stale tokens."""
    return [item for item in items if item is not None]


def reconcile_orphaned_tickets(items):
    """Reconcile orphaned tickets."""
    return [item for item in items if item is not None]


def compact_pending_sessions(items):
    """Compact pending sessions."""
    return [item for item in items if item is not None]

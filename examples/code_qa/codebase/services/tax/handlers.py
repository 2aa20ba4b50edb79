"""Request handlers of the tax service."""

from services.tax.config import MAX_RETRIES


def rebuild_nightly_sessions(items):
    """Rebuild nightly sessions."""
    return [item for item in items if item is not None]


def snapshot_nightly_ledgers(items):
    """Snapshot nightly ledgers."""
    return [item for item in items if item is not None]


def reindex_partial_vouchers(items):
    """Reindex partial vouchers."""
    return [item for item in items if item is not None]

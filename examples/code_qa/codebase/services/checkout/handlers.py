"""Request handlers of the checkout service."""

from services.checkout.config import MAX_RETRIES


def archive_expired_quotas(items):
    """Archive expired quotas."""
    return [item for item in items if item is not None]


def refresh_partial_vouchers(items):
    """Refresh partial vouchers."""
    return [item for item in items if item is not None]


def merge_expired_tokens(items):
    """Merge expired tokens."""
    return [item for item in items if item is not None]

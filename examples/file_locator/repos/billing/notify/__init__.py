"""The notify package of billing."""

"""The customers package of billing."""

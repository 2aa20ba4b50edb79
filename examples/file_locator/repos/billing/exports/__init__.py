"""The exports package of billing."""

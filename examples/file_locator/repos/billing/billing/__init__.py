"""The billing package of billing."""

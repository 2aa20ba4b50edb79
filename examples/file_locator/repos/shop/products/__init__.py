"""The products package of shop."""

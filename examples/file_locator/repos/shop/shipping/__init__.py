"""The shipping package of shop."""

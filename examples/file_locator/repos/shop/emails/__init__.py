"""The emails package of shop."""

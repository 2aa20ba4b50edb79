"""The feeds package of blog."""

"""The search package of blog."""

"""The auth package of blog."""

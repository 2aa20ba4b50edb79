"""The blog package of blog."""

"""The media package of blog."""

"""The notify package of library."""

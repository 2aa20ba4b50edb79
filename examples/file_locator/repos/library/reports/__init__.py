"""The reports package of library."""

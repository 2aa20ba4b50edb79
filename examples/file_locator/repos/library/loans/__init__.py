"""The loans package of library."""

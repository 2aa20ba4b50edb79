"""The catalog package of library."""

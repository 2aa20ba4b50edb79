"""The members package of library."""

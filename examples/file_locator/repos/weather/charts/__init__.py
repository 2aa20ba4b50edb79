"""The charts package of weather."""

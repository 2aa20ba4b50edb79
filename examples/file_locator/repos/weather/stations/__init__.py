"""The stations package of weather."""

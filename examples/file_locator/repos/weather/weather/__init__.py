"""The weather package of weather."""

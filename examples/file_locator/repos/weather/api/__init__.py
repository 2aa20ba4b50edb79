"""The api package of weather."""

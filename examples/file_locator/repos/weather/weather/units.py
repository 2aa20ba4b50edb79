"""Unit conversions."""


def celsius_to_fahrenheit(celsius):
    """Degrees Celsius in Fahrenheit."""
    return celsius * 9 / 5 + 32


def wind_speed_kmh(meters_per_second):
    """Wind speed in km/h."""
    return round(meters_per_second * 3.6, 1)

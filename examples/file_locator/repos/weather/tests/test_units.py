"""Tests of weather/units.py."""

from weather.units import celsius_to_fahrenheit, wind_speed_kmh


def test_celsius_to_fahrenheit():
    result = celsius_to_fahrenheit(100)
    assert result is not None


def test_wind_speed_kmh():
    result = wind_speed_kmh(10)
    assert result is not None

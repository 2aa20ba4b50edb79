"""The Agents SDK example's two tools as plain functions: unit conversions with decimals the 135M
model cannot work out in its head."""

from __future__ import annotations


def miles_to_km(miles: float) -> str:
    """Convert a distance in miles to kilometres (rounded to 2 decimals)."""
    return f"{miles * 1.609344:.2f}"


def celsius_to_fahrenheit(celsius: float) -> str:
    """Convert a temperature in degrees Celsius to degrees Fahrenheit (rounded to 1 decimal)."""
    return f"{celsius * 9 / 5 + 32:.1f}"

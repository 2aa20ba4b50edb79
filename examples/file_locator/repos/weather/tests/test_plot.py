"""Tests of charts/plot.py."""

from charts.plot import temperature_chart, rain_chart


def test_temperature_chart():
    result = temperature_chart([{'temp': 3}])
    assert result is not None


def test_rain_chart():
    result = rain_chart([{'rain': 2}])
    assert result is not None

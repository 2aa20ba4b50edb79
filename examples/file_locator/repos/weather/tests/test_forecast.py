"""Tests of weather/forecast.py."""

from weather.forecast import daily_forecast, hourly_forecast


def test_daily_forecast():
    result = daily_forecast('Oslo')
    assert result is not None


def test_hourly_forecast():
    result = hourly_forecast('Oslo')
    assert result is not None

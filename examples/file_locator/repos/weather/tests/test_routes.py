"""Tests of api/routes.py."""

from api.routes import forecast_endpoint, health_check


def test_forecast_endpoint():
    result = forecast_endpoint({'city': 'Rome'})
    assert result is not None


def test_health_check():
    result = health_check()
    assert result is not None

"""Tests of weather/alerts.py."""

from weather.alerts import storm_alerts, alert_message


def test_storm_alerts():
    result = storm_alerts([{'wind': 30}])
    assert result is not None


def test_alert_message():
    result = alert_message({'wind': 30})
    assert result is not None

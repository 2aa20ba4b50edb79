"""Severe weather alerts."""


def storm_alerts(readings):
    """Alerts for readings with storm-force wind."""
    return [r for r in readings if r.get('wind', 0) > 24]


def alert_message(alert):
    """The text shown for an alert."""
    return f"Storm warning: wind {alert['wind']} m/s"

"""Forecasts for a city."""


def daily_forecast(city, days=3):
    """One forecast per day for a city."""
    return [{'city': city, 'day': d, 'temp': 20 - d} for d in range(days)]


def hourly_forecast(city):
    """Forecasts for the next 24 hours."""
    return [{'city': city, 'hour': h} for h in range(24)]

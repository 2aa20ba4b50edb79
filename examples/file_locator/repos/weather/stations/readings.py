"""Station readings."""

STORE: dict = {}


def load_readings(station_id):
    """The stored readings of a station."""
    return list(STORE.get(station_id, []))


def average_temperature(readings):
    """Mean temperature of some readings."""
    temps = [r['temp'] for r in readings]
    return sum(temps) / len(temps) if temps else None

"""Known weather stations."""

STATIONS: dict = {}


def register_station(name, lat, lon):
    """Add a station to the registry."""
    STATIONS[name] = (lat, lon)
    return name


def nearest_station(lat, lon):
    """The station closest to a point."""
    return min(STATIONS, key=lambda s: (STATIONS[s][0] - lat) ** 2 + (STATIONS[s][1] - lon) ** 2, default=None)

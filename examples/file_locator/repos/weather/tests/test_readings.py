"""Tests of stations/readings.py."""

from stations.readings import load_readings, average_temperature


def test_load_readings():
    result = load_readings('st-1')
    assert result is not None


def test_average_temperature():
    result = average_temperature([{'temp': 3}])
    assert result is not None

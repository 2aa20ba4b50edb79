"""Tests of stations/registry.py."""

from stations.registry import register_station, nearest_station


def test_register_station():
    result = register_station('a', 1.0, 2.0)
    assert result is not None


def test_nearest_station():
    result = nearest_station(1.0, 2.0)
    assert result is not None

"""Metrics computed from rollouts (no rendering) and the sinks that record them."""

"""Helpers of the sandbox tests."""

from __future__ import annotations

import pytest


def need(layers: tuple[str, ...], *names: str) -> None:
    """Skip the test, saying why, unless the host granted every layer in ``names``."""
    missing = [n for n in names if n not in layers]
    if missing:
        pytest.skip(f"this host does not allow {missing} (applied: {layers})")

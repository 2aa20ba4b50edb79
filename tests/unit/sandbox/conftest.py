"""Fixtures of the sandbox tests: the isolation layers this host grants, a fresh workspace."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from arft.sandbox import create_workspace, probe_isolation


@pytest.fixture(scope="session")
def layers(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, ...]:
    """The layers the launcher applies here (hosts that refuse some skip the tests needing them)."""
    return asyncio.run(probe_isolation(tmp_path_factory.mktemp("probe")))


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return create_workspace(tmp_path / "workspaces", None, "trace_" + uuid.uuid4().hex)

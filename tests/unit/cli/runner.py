"""Running `arft` commands in-process for the CLI tests, and reading what they printed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner, Result

from arft.cli.main import app as cli


def invoke(*args: str) -> Result:
    """``arft ARGS...`` through the real app; stdout and stderr are kept apart."""
    return CliRunner().invoke(cli, list(args))


def flat(text: str) -> str:
    """Output with rich's line wrapping undone."""
    return " ".join(text.split())


def write(path: Path, data: Any) -> str:
    path.write_text(json.dumps(data))
    return str(path)


def last_json(output: str) -> dict[str, Any]:
    return json.loads(output.strip().splitlines()[-1])

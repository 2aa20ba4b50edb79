"""``arft.cli.main``: every command registered, and `arft --help` free of heavy imports."""

from __future__ import annotations

import json
import subprocess
import sys

from arft.cli.main import COMMANDS, GROUPS
from tests.unit.cli.runner import invoke

EVERY_COMMAND = ["import", "eval", "train", "sft", "merge", "serve", "show", "export", "grade", "doctor", "view", "report",
                 "grader"]
# Packages that take seconds to import (or pull a GPU stack): only the commands that run them
# may import them, never `arft --help`.
HEAVY = ["torch", "transformers", "peft", "vllm", "ray", "fastapi", "uvicorn", "matplotlib",
         "xgrammar", "numpy"]


def test_every_command_is_registered_once() -> None:
    names = [name for name, _ in COMMANDS] + [name for name, _ in GROUPS]
    assert names == EVERY_COMMAND


def test_help_lists_every_command() -> None:
    out = invoke("--help")
    assert out.exit_code == 0, out.output
    panel = out.stdout[out.stdout.index("─ Commands ─"):].splitlines()[1:]
    # a command's row starts right after the border; a wrapped help text is indented
    listed = [line.split()[1] for line in panel if line.startswith("│ ") and line[2] != " "]
    assert listed == EVERY_COMMAND
    grader = invoke("grader", "--help")
    assert grader.exit_code == 0 and "validate" in grader.stdout and "audit" in grader.stdout


def test_importing_the_cli_imports_no_heavy_package() -> None:
    """In a fresh interpreter: this test process may have imported them for other tests."""
    code = ("import json, sys, arft.cli.main; "
            f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []

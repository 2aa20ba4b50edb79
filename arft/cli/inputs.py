"""Reading the arguments of arft's commands: the JSON ones (``--grader``, ``--item``,
``--sample``: inline JSON or a file path, with errors that say what to pass), and the ``--set``
option every command that loads a job shares."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from arft.cli.console import fail
from arft.graders.validate import InputError


def read_json_arg(value: str, what: str) -> tuple[Any, Path]:
    """``value`` as JSON: inline when it starts with ``{`` or ``[``, else a file path.

    Returns the data and the folder that relative paths inside it resolve against (the file's
    folder, or the current directory for inline JSON). ``what`` names the argument in errors.
    """
    text = value.strip()
    if text.startswith(("{", "[")):
        try:
            return json.loads(text), Path.cwd()
        except json.JSONDecodeError as e:
            raise InputError(f"{what}: inline JSON is not valid ({e.msg} at column {e.colno}); "
                             "quote it for the shell, e.g. '{\"answer\": \"Paris\"}'") from None
    path = Path(value).expanduser()
    if not path.is_file():
        raise InputError(f"{what}: {value!r} is neither a file nor inline JSON; pass the path "
                         "of a JSON file or a JSON object starting with '{'")
    try:
        return json.loads(path.read_text(encoding="utf-8")), path.resolve().parent
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"{what}: {path} is not valid JSON ({e}); fix the file or pass "
                         "inline JSON") from None


def require_object(data: Any, what: str) -> dict[str, Any]:
    """``data`` when it is a JSON object, else an ``InputError`` naming ``what``."""
    if not isinstance(data, dict):
        raise InputError(f"{what} must be a JSON object, got {type(data).__name__}")
    return data


def read_object_arg(value: str, what: str) -> tuple[dict[str, Any], Path]:
    """``value`` read as a JSON object, with its base folder (as ``read_json_arg``); a value that
    cannot be read, or is not an object, fails the command with the error (exit 2)."""
    try:
        data, base_dir = read_json_arg(value, what)
        return require_object(data, what), base_dir
    except InputError as e:
        fail(str(e))


def set_option() -> Any:
    """The ``--set SECTION.FIELD=VALUE`` option (repeatable) of every command that loads a job;
    its values go to ``load_job(path, overrides)``, which validates them as the job file."""
    return typer.Option(
        [], "--set", metavar="SECTION.FIELD=VALUE",
        help="Override a job field, value read as YAML (repeatable), e.g. --set sampling.temperature=0.9 "
             "--set training.max_steps=3 --set rollout.max_turns=1.")

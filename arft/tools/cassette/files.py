"""What a tool call did to the rollout's workspace, recorded and replayed.

Tools that work in a workspace (shell, python tools reading ``ctx.workspace``) change files that
a later call or the grader reads (``tests_pass`` runs the tests on it). A replayed call must leave
the workspace as the live call did, so recording snapshots the workspace before and after each
call and keeps the difference: every file created or changed (its content and mode) and every
file deleted. Replaying writes and deletes the same files in the fresh workspace.

Content is stored as text when it is UTF-8, else as base64. A file over the cap is not stored:
the record says which, and replaying that call is a cassette miss naming it (a replay that
silently left the file out would grade a different workspace). Empty folders and symbolic
links are not recorded (see docs/replay.md).
"""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict

from arft.errors import ArftError


class WorkspaceReplayError(ArftError):
    """A recorded file change that cannot be applied (a path that leaves the workspace)."""


class FileChange(BaseModel):
    """One file a call created, changed or deleted, by its path inside the workspace."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str
    op: Literal["write", "delete"]
    text: str | None = None
    """The new content, when it is UTF-8 text."""
    base64: str | None = None
    """The new content otherwise."""
    mode: int | None = None
    """The permission bits (``0o755`` for a script made executable)."""


class Diff(NamedTuple):
    """A call's changes, and the files too big to record (``path: size``), if any."""

    changes: list[FileChange]
    too_big: list[str]


Snapshot = dict[str, tuple[str, int]]
"""Relative path -> (content digest, permission bits) of every regular file."""


def snapshot(root: Path) -> Snapshot:
    """Every regular file under ``root`` (links not followed) with its digest and mode."""
    found: Snapshot = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = Path(folder) / name
            if path.is_symlink() or not path.is_file():
                continue
            found[path.relative_to(root).as_posix()] = (
                hashlib.blake2b(path.read_bytes(), digest_size=16).hexdigest(), path.stat().st_mode & 0o777)
    return found


def diff(root: Path, before: Snapshot, after: Snapshot, max_bytes: int) -> Diff:
    """The changes from ``before`` to ``after`` (both of ``root``), content read from ``root``."""
    changes: list[FileChange] = []
    too_big: list[str] = []
    for rel in sorted(after):
        if before.get(rel) == after[rel]:
            continue
        data = (root / rel).read_bytes()
        if len(data) > max_bytes:
            too_big.append(f"{rel}: {len(data)} bytes")
            continue
        changes.append(_write(rel, data, after[rel][1]))
    changes += [FileChange(path=rel, op="delete") for rel in sorted(set(before) - set(after))]
    return Diff(changes, too_big)


def _write(rel: str, data: bytes, mode: int) -> FileChange:
    try:
        return FileChange(path=rel, op="write", text=data.decode("utf-8"), mode=mode)
    except UnicodeDecodeError:
        return FileChange(path=rel, op="write", base64=base64.b64encode(data).decode(), mode=mode)


def apply(root: Path, changes: list[FileChange]) -> None:
    """Make ``changes`` in the workspace ``root``; a path that leaves it is refused."""
    base = root.resolve()
    for change in changes:
        target = (base / change.path).resolve()
        if not target.is_relative_to(base) or target == base:
            raise WorkspaceReplayError(f"recorded file {change.path!r} is outside the workspace; "
                                       "the cassette was edited or is not arft's")
        if change.op == "delete":
            target.unlink(missing_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if change.base64 is not None:
            target.write_bytes(base64.b64decode(change.base64))
        else:
            target.write_bytes((change.text or "").encode("utf-8"))
        if change.mode is not None:
            target.chmod(change.mode)

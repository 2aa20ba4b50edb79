"""Per-rollout workspaces: a fresh directory (a copy of the job's template, or empty) per trace id.

Shell tools run in the rollout's workspace and graders may inspect it afterwards, so every
rollout gets its own copy; nothing one rollout writes is seen by another. The workspace root is
created mode 0711 (enter, but not list) so a sandboxed command cannot discover the names of
sibling workspaces.

Beside each workspace, in the root (which the sandbox cannot write), ``create_workspace`` notes
which template it was copied from; ``template_of`` reads it back, so a grader can tell the task's
pristine files from what the agent wrote (``tests_pass`` restores the pristine test config).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from pathlib import Path
from typing import Callable

from arft.errors import ArftError

_SAFE_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


# ValueError too: the doctor's baseline (arft.app.doctor.run) reports a ValueError from the run it
# starts (a workspace template that is not a folder) as a failed check.
class WorkspaceError(ArftError, ValueError):
    """A workspace cannot be created (bad template, bad id, already exists)."""


def create_workspace(root: Path, template: Path | None, trace_id: str) -> Path:
    """Make ``root/trace_id``: a copy of ``template`` (symlinks copied as links), or empty.

    Raises ``WorkspaceError`` when the template is not a directory, the id is not a plain
    file name, or the workspace exists already (trace ids are unique per rollout).
    """
    if not _SAFE_NAME.match(trace_id) or trace_id in (".", ".."):
        raise WorkspaceError(f"trace id {trace_id!r} is not a plain file name; use "
                             "arft.records.new_trace_id() to make one")
    if template is not None and not Path(template).is_dir():
        raise WorkspaceError(f"workspace template {template} is not a directory; point "
                             "`rollout.workspace` at a folder to copy for each rollout")
    root = Path(root)
    if not root.exists():
        root.mkdir(parents=True)
        root.chmod(0o711)
    path = root / trace_id
    if path.exists() or path.is_symlink():
        raise WorkspaceError(f"workspace {path} already exists; remove it (remove_workspace) or "
                             "use a fresh trace id")
    if template is None:
        path.mkdir()
    else:
        # symlinks=True: a link in the template stays a link, never a copy of what it points at.
        shutil.copytree(template, path, symlinks=True)
        _template_note(path).write_text(str(Path(template).resolve()), encoding="utf-8")
    return path


def _template_note(workspace: Path) -> Path:
    return workspace.parent / f".{workspace.name}.template"


def template_of(workspace: Path) -> Path | None:
    """The template folder ``workspace`` was copied from by ``create_workspace``; None for an
    empty workspace, a folder made otherwise, or a template that is gone."""
    try:
        noted = Path(_template_note(Path(workspace)).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return None
    return noted if noted.is_dir() else None


def remove_workspace(path: Path) -> None:
    """Delete a workspace and everything in it; a missing one is fine.

    Works even when a sandboxed command left directories without write or search permission.
    The note of its template (see ``template_of``) goes with it.
    """
    path = Path(path)
    _template_note(path).unlink(missing_ok=True)
    if path.is_symlink():
        path.unlink()
        return
    if not path.exists():
        return
    if not path.is_dir():
        raise WorkspaceError(f"{path} is not a workspace directory; refusing to delete it")
    shutil.rmtree(path, onerror=_make_writable_and_retry)


def _make_writable_and_retry(_func: Callable[..., object], failed: str, _exc: object) -> None:
    """rmtree's error hook: give the owner rwx on the parent and the entry, then delete it."""
    for p in (os.path.dirname(failed), failed):
        try:
            if not os.path.islink(p):
                os.chmod(p, stat.S_IRWXU | os.stat(p).st_mode)
        except OSError:
            pass  # not ours to change; the delete below says why it fails
    if os.path.isdir(failed) and not os.path.islink(failed):
        shutil.rmtree(failed)
    elif os.path.lexists(failed):
        os.unlink(failed)

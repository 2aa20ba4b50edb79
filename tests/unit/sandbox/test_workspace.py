"""Per-rollout workspaces: fresh copies of a template, independent, safely removed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from arft.sandbox import WorkspaceError, create_workspace, remove_workspace
from arft.sandbox.workspace import template_of


@pytest.fixture
def template(tmp_path: Path) -> Path:
    t = tmp_path / "template"
    (t / "src").mkdir(parents=True)
    (t / "src" / "main.py").write_text("print('hi')\n")
    (t / "README").write_text("read me\n")
    os.symlink("/etc/hostname", t / "link")
    return t


def test_copies_the_template(tmp_path: Path, template: Path) -> None:
    ws = create_workspace(tmp_path / "root", template, "trace_a")
    assert ws == tmp_path / "root" / "trace_a"
    assert (ws / "src" / "main.py").read_text() == "print('hi')\n"
    assert (ws / "README").read_text() == "read me\n"
    # A link stays a link: copying its target could pull outside files into the workspace.
    assert (ws / "link").is_symlink() and os.readlink(ws / "link") == "/etc/hostname"


def test_workspaces_are_independent(tmp_path: Path, template: Path) -> None:
    a = create_workspace(tmp_path / "root", template, "trace_a")
    b = create_workspace(tmp_path / "root", template, "trace_b")
    (a / "README").write_text("changed\n")
    (a / "new").write_text("x")
    assert (b / "README").read_text() == "read me\n" and not (b / "new").exists()
    assert (template / "README").read_text() == "read me\n"


def test_empty_workspace_and_root_mode(tmp_path: Path) -> None:
    ws = create_workspace(tmp_path / "root", None, "trace_e")
    assert ws.is_dir() and list(ws.iterdir()) == []
    assert (tmp_path / "root").stat().st_mode & 0o777 == 0o711  # enter, but not list


def test_bad_input_is_refused(tmp_path: Path, template: Path) -> None:
    create_workspace(tmp_path / "root", template, "trace_dup")
    with pytest.raises(WorkspaceError, match="already exists"):
        create_workspace(tmp_path / "root", template, "trace_dup")
    for bad in ("../escape", "a/b", "..", ""):
        with pytest.raises(WorkspaceError, match="plain file name"):
            create_workspace(tmp_path / "root", template, bad)
    with pytest.raises(WorkspaceError, match="rollout.workspace"):
        create_workspace(tmp_path / "root", tmp_path / "no-template", "trace_x")


def test_remove_workspace(tmp_path: Path, template: Path) -> None:
    ws = create_workspace(tmp_path / "root", template, "trace_r")
    locked = ws / "locked" / "deeper"
    locked.mkdir(parents=True)
    (locked / "f").write_text("x")
    locked.chmod(0)
    (ws / "locked").chmod(0o500)
    remove_workspace(ws)
    assert not ws.exists()
    assert template.exists() and Path("/etc/hostname").exists()  # links were not followed
    remove_workspace(ws)  # already gone: fine
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(WorkspaceError, match="refusing"):
        remove_workspace(a_file)


def test_the_template_is_noted_beside_the_workspace(tmp_path: Path, template: Path) -> None:
    ws = create_workspace(tmp_path / "root", template, "trace_t")
    assert template_of(ws) == template.resolve()
    assert template_of(create_workspace(tmp_path / "root", None, "trace_none")) is None
    assert template_of(tmp_path) is None  # not made by create_workspace
    remove_workspace(ws)
    assert sorted(p.name for p in (tmp_path / "root").iterdir()) == ["trace_none"]  # note gone

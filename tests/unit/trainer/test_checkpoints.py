"""Atomic checkpoints (the data cursor they store: tests/unit/data/test_order.py)."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest
import torch

from arft.tracing.run_dir import RunDir
from arft.data.order import Cursor
from arft.trainer.checkpoints import CheckpointError, discard_checkpoints_after, load_checkpoint, save_checkpoint


def test_a_half_written_checkpoint_is_never_latest(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    (root / "step-000002").mkdir(parents=True)
    (root / "step-000002" / "state.json").write_text("{}")
    (root / "latest").write_text("step-000002")
    (root / ".tmp-step-000003").mkdir()  # killed while writing step 3
    assert RunDir(tmp_path).latest_checkpoint() == root / "step-000002"
    (root / "latest").write_text("step-000004")  # points at something missing: the newest complete
    assert RunDir(tmp_path).latest_checkpoint() == root / "step-000002"
    (root / "step-000004").mkdir()  # incomplete (no state.json): still not picked
    assert RunDir(tmp_path).latest_checkpoint() == root / "step-000002"
    (root / "latest").unlink()
    assert RunDir(tmp_path).latest_checkpoint() == root / "step-000002"
    assert RunDir(tmp_path / "nothing").latest_checkpoint() is None


def test_release_memory_trims_the_heap_on_glibc() -> None:
    import platform

    from arft.trainer.memory import release_memory

    result = release_memory()
    assert result is (platform.libc_ver()[0] == "glibc")


class FakeLearner:
    """What checkpoints read and restore of a learner: trainable weights and a state dict."""

    def __init__(self, value: float) -> None:
        self.weights = {"w": torch.full((4, 4), value)}
        self.state = {"lr": value}

    def trainable_state(self) -> dict[str, torch.Tensor]:
        return self.weights

    def state_dict(self) -> dict[str, Any]:
        return self.state

    def load_trainable_state(self, weights: dict[str, torch.Tensor]) -> None:
        self.weights = dict(weights)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.state = state


def loaded(run_dir: Path) -> tuple[Cursor, FakeLearner]:
    latest = RunDir(run_dir).latest_checkpoint()
    assert latest is not None
    learner = FakeLearner(0.0)
    cursor, _ = load_checkpoint(latest, learner, Cursor)
    return cursor, learner


class Killed(BaseException):
    """Stands in for SIGKILL: nothing after it runs, no cleanup (not an OSError)."""


def test_a_full_disk_midway_keeps_the_previous_checkpoint_loadable(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    save_checkpoint(tmp_path, Cursor(5, 0, 10), FakeLearner(5.0), {"total_steps": 10})
    real_save = torch.save

    def half_then_enospc(obj: Any, path: Any) -> None:  # writes half the file, then the disk is full
        real_save(obj, path)
        data = Path(path).read_bytes()
        Path(path).write_bytes(data[:len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", half_then_enospc)
    with pytest.raises(CheckpointError, match="step-000006.*No space left.*step-000005 is intact") as info:
        save_checkpoint(tmp_path, Cursor(6, 0, 12), FakeLearner(6.0), {"total_steps": 10})
    assert info.value.errno == errno.ENOSPC and isinstance(info.value, OSError)
    root = RunDir(tmp_path).checkpoints
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step-000005"]  # no half-written folder
    cursor, learner = loaded(tmp_path)
    assert cursor == Cursor(5, 0, 10) and torch.equal(learner.weights["w"], torch.full((4, 4), 5.0))
    assert learner.state == {"lr": 5.0}


@pytest.mark.parametrize("at", ["trainable.safetensors", "learner.pt", "rng.pt", "state.json", "renamed"])
def test_a_kill_during_the_write_leaves_the_previous_checkpoint_latest(tmp_path: Path, at: str) -> None:
    save_checkpoint(tmp_path, Cursor(5, 0, 10), FakeLearner(5.0), {})

    def kill(name: str) -> None:
        if name == at:
            raise Killed

    with pytest.raises(Killed):
        save_checkpoint(tmp_path, Cursor(6, 0, 12), FakeLearner(6.0), {}, on_file=kill)
    assert RunDir(tmp_path).latest_checkpoint() == RunDir(tmp_path).checkpoints / "step-000005"
    assert loaded(tmp_path)[0].step == 5
    # the resumed run drops what the killed one left, then writes step 6 again
    left = discard_checkpoints_after(tmp_path, 5)
    assert [p.name for p in left] == ["step-000006" if at == "renamed" else ".tmp-step-000006"]
    save_checkpoint(tmp_path, Cursor(6, 0, 12), FakeLearner(6.0), {})
    cursor, learner = loaded(tmp_path)
    assert cursor.step == 6 and torch.equal(learner.weights["w"], torch.full((4, 4), 6.0))
    assert sorted(p.name for p in RunDir(tmp_path).checkpoints.iterdir()) == ["latest", "step-000005",
                                                                             "step-000006"]

"""Checkpoints: everything needed to continue a run exactly, written atomically.

``RUN_DIR/checkpoints/step-000005/`` holds the trainable weights (``trainable.safetensors``:
the LoRA adapter, or the whole model), the optimizer and scheduler (``learner.pt``), the RNG
states and the data cursor (``state.json`` + ``rng.pt``; the cursor is ``arft.data.order``'s).
``RUN_DIR/checkpoints/latest`` names the newest complete one.

A checkpoint is written into ``.tmp-step-000005/``, every file fsynced, then renamed to
``step-000005/`` (and the folder fsynced) and only then made ``latest`` (``write_durably``). A
``kill -9`` or a full disk at any moment therefore leaves the previous checkpoint loadable and
never lets ``RunDir.latest_checkpoint()`` pick a half-written one; a failed write removes its
temporary folder and raises ``CheckpointError``.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from arft.errors import ArftError
from arft.tracing.run_dir import RunDir, checkpoint_step, fsync_dir, write_durably

if TYPE_CHECKING:
    import torch


# OSError too: it is the failed write's OSError, with its errno (CheckpointError(errno, message)).
class CheckpointError(ArftError, OSError):
    """A checkpoint could not be written (disk full, permissions: the previous one is intact), or
    the one asked for cannot be used (none yet to resume or merge, another model's adapter)."""


class Position(Protocol):
    """What a checkpoint records of where the run is (``arft.data.order.Cursor``, which the
    trainer does not import): a dataclass whose ``step`` names the checkpoint."""

    __dataclass_fields__: ClassVar[dict[str, Any]]
    step: int


P = TypeVar("P", bound=Position)


class Checkpointable(Protocol):
    """What a checkpoint saves and restores of a learner: ``arft.trainer.learner.Learner``, or a
    cluster's ``RemoteLearner`` that forwards to one."""

    def trainable_state(self) -> dict[str, "torch.Tensor"]: ...

    def load_trainable_state(self, state: dict[str, "torch.Tensor"]) -> None: ...

    def state_dict(self) -> dict[str, object]: ...

    def load_state_dict(self, state: dict[str, dict[str, object]]) -> None: ...


def save_checkpoint(run_dir: Path, cursor: Position, learner: Checkpointable, extra: dict[str, object],
                    on_file: Callable[[str], None] = lambda name: None) -> Path:
    """Write checkpoint ``cursor.step`` atomically and point ``latest`` at it.

    ``on_file(name)`` is called after each file is durably written into the temporary folder and
    once more (``"renamed"``) after the rename, before ``latest`` moves: the moments a
    fault-injection test kills the process. Raises ``CheckpointError`` (an ``OSError`` with the
    original errno) when the disk is full or the folder not writable; the previous checkpoint
    stays the latest and loadable.
    """
    rd = RunDir(run_dir)
    final = rd.checkpoints / f"step-{cursor.step:06d}"
    tmp = rd.checkpoints / f".tmp-{final.name}"
    try:
        shutil.rmtree(tmp, ignore_errors=True)  # the remains of a write that was killed
        tmp.mkdir(parents=True)
        for name, write in _writers(cursor, learner, extra):
            write(tmp / name)
            _fsync(tmp / name)
            on_file(name)
        fsync_dir(tmp)
        if final.exists():  # written by an interrupted run but never made latest
            shutil.rmtree(final)
        os.rename(tmp, final)
        fsync_dir(rd.checkpoints)
        on_file("renamed")
        write_durably(rd.checkpoints / "latest", final.name)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        previous = rd.latest_checkpoint()
        kept = f"the previous checkpoint {previous.name} is intact" if previous else "no earlier checkpoint exists"
        message = (f"checkpoint {final.name} could not be written in {rd.checkpoints} ({exc.strerror or exc}); "
                   f"{kept}: free disk space (or fix the folder's permissions) and continue with "
                   f"`arft train --resume {rd.path}`")
        raise (CheckpointError(exc.errno, message) if exc.errno else CheckpointError(message)) from exc
    return final


def _writers(cursor: Position, learner: Checkpointable, extra: dict[str, object]
             ) -> list[tuple[str, Callable[[Path], None]]]:
    """The checkpoint's files and how to write each; ``state.json`` last (it marks completeness)."""
    import torch
    from safetensors.torch import save_file

    state = {k: v.contiguous() for k, v in learner.trainable_state().items()}
    rng = {"torch": torch.get_rng_state(), "python": random.getstate()}
    return [("trainable.safetensors", lambda p: save_file(state, str(p))),
            ("learner.pt", lambda p: torch.save(learner.state_dict(), p)),
            ("rng.pt", lambda p: torch.save(rng, p)),
            ("state.json", lambda p: p.write_text(json.dumps({"cursor": asdict(cursor), **extra}, indent=2)))]


def _fsync(path: Path) -> None:
    with path.open("rb") as f:
        os.fsync(f.fileno())


def discard_checkpoints_after(run_dir: Path, step: int) -> list[Path]:
    """Remove the checkpoint folders of steps after ``step`` (an interrupted run wrote them but
    never made them latest) and every half-written ``.tmp-*`` folder; returns what was removed."""
    root = RunDir(run_dir).checkpoints
    if not root.is_dir():
        return []
    gone = [p for p in root.iterdir() if p.is_dir() and (
        p.name.startswith(".tmp-") or (checkpoint_step(p) or 0) > step)]
    for p in gone:
        shutil.rmtree(p)
    return sorted(gone)


def load_checkpoint(path: Path, learner: Checkpointable, cursor_type: type[P]) -> tuple[P, dict[str, Any]]:
    """Restore weights, optimizer, scheduler and RNG states; returns the cursor (a
    ``cursor_type``) and the extra state."""
    import torch
    from safetensors.torch import load_file

    learner.load_trainable_state(load_file(str(path / "trainable.safetensors")))
    learner.load_state_dict(torch.load(path / "learner.pt", weights_only=False))
    rng = torch.load(path / "rng.pt", weights_only=False)
    torch.set_rng_state(rng["torch"])
    random.setstate(rng["python"])
    state = json.loads((path / "state.json").read_text())
    return cursor_type(**state.pop("cursor")), state

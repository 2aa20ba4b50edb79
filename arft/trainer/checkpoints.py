"""Checkpoints: everything needed to continue a run exactly, written atomically.

``RUN_DIR/checkpoints/step-000005/`` holds the trainable weights (``trainable.safetensors``:
the LoRA adapter, or the whole model), the optimizer and scheduler (``learner.pt``), the RNG
states and the data cursor (``state.json`` + ``rng.pt``). ``RUN_DIR/checkpoints/latest`` names
the newest complete one; it is replaced only after the checkpoint is fully written, so a
``kill -9`` at any moment leaves the previous checkpoint usable.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from arft.tracing.run_dir import RunDir


@dataclass
class Cursor:
    """Where the run is: the next step to run and the position in the shuffled training set."""

    step: int = 0
    epoch: int = 0
    index: int = 0


def batch_for(cursor: Cursor, n_tasks: int, batch_size: int, seed: int) -> tuple[list[int], Cursor]:
    """Task indices of the next batch and the cursor after it (epochs reshuffle; no partial batch
    unless the whole set is smaller than a batch)."""
    size = min(batch_size, n_tasks)
    epoch, index = cursor.epoch, cursor.index
    if index + size > n_tasks:
        epoch, index = epoch + 1, 0
    order = list(range(n_tasks))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return order[index:index + size], Cursor(cursor.step + 1, epoch, index + size)


def steps_per_epoch(n_tasks: int, batch_size: int) -> int:
    return max(n_tasks // max(batch_size, 1), 1)


def save_checkpoint(run_dir: Path, cursor: Cursor, learner: Any, extra: dict[str, Any]) -> Path:
    """Write checkpoint ``cursor.step`` and point ``latest`` at it."""
    import torch
    from safetensors.torch import save_file

    root = RunDir(run_dir).checkpoints
    final = root / f"step-{cursor.step:06d}"
    tmp = root / f".tmp-step-{cursor.step:06d}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    state = {k: v.contiguous() for k, v in learner.trainable_state().items()}
    save_file(state, str(tmp / "trainable.safetensors"))
    torch.save(learner.state_dict(), tmp / "learner.pt")
    torch.save({"torch": torch.get_rng_state(), "python": random.getstate()}, tmp / "rng.pt")
    (tmp / "state.json").write_text(json.dumps({"cursor": asdict(cursor), **extra}, indent=2))
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    pointer = root / ".latest.tmp"
    pointer.write_text(final.name)
    os.replace(pointer, root / "latest")  # atomic switch to the new checkpoint
    return final


def load_checkpoint(path: Path, learner: Any) -> tuple[Cursor, dict[str, Any]]:
    """Restore weights, optimizer, scheduler and RNG states; returns the cursor and extra state."""
    import torch
    from safetensors.torch import load_file

    learner.load_trainable_state(load_file(str(path / "trainable.safetensors")))
    learner.load_state_dict(torch.load(path / "learner.pt", weights_only=False))
    rng = torch.load(path / "rng.pt", weights_only=False)
    torch.set_rng_state(rng["torch"])
    random.setstate(rng["python"])
    state = json.loads((path / "state.json").read_text())
    return Cursor(**state.pop("cursor")), state

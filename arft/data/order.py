"""The order a run visits its training tasks: a fresh shuffle every epoch, seeded by the run.

``Cursor`` is where a run is in that order (the next step, the epoch, the position in the epoch's
shuffle); a checkpoint stores it, so a resumed run draws exactly the batches the uninterrupted
one would have. The shuffle's seed comes from ``arft.seeds.data_order_seed``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from arft.seeds import data_order_seed


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
    random.Random(data_order_seed(seed, epoch)).shuffle(order)
    return order[index:index + size], Cursor(cursor.step + 1, epoch, index + size)


def steps_per_epoch(n_tasks: int, batch_size: int) -> int:
    """Full batches in one pass over ``n_tasks`` tasks (at least one)."""
    return max(n_tasks // max(batch_size, 1), 1)

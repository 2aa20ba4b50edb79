"""The data order: every epoch visits each task once, reshuffled, from the run's seed."""

from __future__ import annotations

from arft.data.order import Cursor, batch_for, steps_per_epoch


def test_batches_cover_each_epoch_once_and_reshuffle() -> None:
    cursor, seen = Cursor(), []
    for _ in range(steps_per_epoch(10, 3) * 2):
        idx, cursor = batch_for(cursor, 10, 3, seed=7)
        seen.append(idx)
    first, second = sum(seen[:3], []), sum(seen[3:], [])
    assert len(set(first)) == 9 and len(set(second)) == 9  # no repeats within an epoch
    assert first != second and cursor.epoch == 1 and cursor.step == 6
    again, _ = batch_for(Cursor(), 10, 3, seed=7)
    assert again == seen[0]  # deterministic from the seed


def test_whole_set_smaller_than_a_batch() -> None:
    idx, c = batch_for(Cursor(), 2, 8, seed=0)
    assert sorted(idx) == [0, 1] and c.step == 1

"""Data cursor and atomic checkpoints."""

from __future__ import annotations

from pathlib import Path

from arft.tracing.run_dir import RunDir
from arft.trainer.checkpoints import Cursor, batch_for, steps_per_epoch


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


def test_a_half_written_checkpoint_is_never_latest(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    (root / "step-000002").mkdir(parents=True)
    (root / "step-000002" / "state.json").write_text("{}")
    (root / "latest").write_text("step-000002")
    (root / ".tmp-step-000003").mkdir()  # killed while writing step 3
    assert RunDir(tmp_path).latest_checkpoint() == root / "step-000002"
    (root / "latest").write_text("step-000004")  # points at something incomplete
    assert RunDir(tmp_path).latest_checkpoint() is None


def test_release_memory_trims_the_heap_on_glibc() -> None:
    import platform

    from arft.trainer.memory import release_memory

    result = release_memory()
    assert result is (platform.libc_ver()[0] == "glibc")

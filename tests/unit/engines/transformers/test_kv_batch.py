"""KVBatch: rows leave and join a running batch in place (only moved or joining rows are copied),
and every remaining row keeps exactly its keys and values."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from arft.engines.transformers.kv_batch import KVBatch, growing_layer

LAYERS, HEADS, DIM = 2, 3, 4


def batch_of(lengths: list[int], seed: int, capacity: int = 0) -> KVBatch:
    """A left-padded batch whose row ``i`` has ``lengths[i]`` positions of random keys/values,
    filled the way a prefill fills it (one ``update`` per layer)."""
    from transformers import DynamicCache

    gen = torch.Generator().manual_seed(seed)
    t = max(lengths)
    mask = torch.tensor([[0] * (t - n) + [1] * n for n in lengths])
    cache = DynamicCache()
    cache.layer_class_to_replicate = growing_layer()
    for layer in range(LAYERS):
        k = torch.randn(len(lengths), HEADS, t, DIM, generator=gen)
        v = torch.randn(len(lengths), HEADS, t, DIM, generator=gen)
        cache.update(k * mask[:, None, :, None], v * mask[:, None, :, None], layer)
    return KVBatch([f"r{seed}.{i}" for i in range(len(lengths))], cache, mask, capacity)


def kv_of(batch: KVBatch) -> dict[Any, list[torch.Tensor]]:
    """Each row's keys and values at its real positions, by row name."""
    out = {}
    for i, row in enumerate(batch.rows):
        n = int(batch.mask[i].sum())
        out[row] = [t for pair in batch.row_kv(i, n) for t in pair]
    return out


def same(a: dict[Any, list[torch.Tensor]], b: dict[Any, list[torch.Tensor]]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(x, y) for r in a for x, y in zip(a[r], b[r]))


def running_batch() -> KVBatch:
    """Five rows in buffers with room for eight (what the engine's running batch has)."""
    batch = batch_of([6, 4], seed=1, capacity=8)
    batch.merge(batch_of([5, 6, 3], seed=2))  # rebuilt once, with room for 8 rows
    return batch


def buffers(batch: KVBatch) -> list[int]:
    return [buf.data_ptr() for layer in batch.cache.layers for buf in (layer.kbuf, layer.vbuf)]


def test_rows_leave_in_place_and_keep_their_cache() -> None:
    batch = running_batch()
    before, ptrs = kv_of(batch), buffers(batch)
    assert batch.cache.layers[0].kbuf.shape[0] == 8
    batch.drop([1, 2])
    assert buffers(batch) == ptrs  # no new buffer: the last rows moved into the freed slots
    assert batch.rows == ["r1.0", "r2.1", "r2.2"]
    assert same(kv_of(batch), {r: before[r] for r in batch.rows})
    assert batch.cache.layers[0].keys.shape[0] == 3 and batch.mask.shape[0] == 3


def test_longer_rows_join_in_place_behind_a_masked_hole() -> None:
    batch = running_batch()
    before, ptrs = kv_of(batch), buffers(batch)
    joining = batch_of([9, 2], seed=3)
    expected = {**before, **kv_of(joining)}
    batch.merge(joining)
    assert buffers(batch) == ptrs
    assert batch.mask.shape == (7, 9)
    assert batch.mask[0].tolist() == [1] * 6 + [0] * 3  # a hole where the new rows are longer
    assert same(kv_of(batch), expected)
    for layer in batch.cache.layers:
        assert not torch.isnan(layer.keys).any() and not torch.isnan(layer.values).any()


def test_decode_after_in_place_changes_appends_to_every_row() -> None:
    batch = running_batch()
    batch.drop([0])
    batch.merge(batch_of([2], seed=4))
    before = kv_of(batch)
    new = torch.ones(batch.size, HEADS, 1, DIM)
    for i, layer in enumerate(batch.cache.layers):
        layer.update(new * (i + 1), new * -(i + 1))
    batch.mask = torch.cat([batch.mask, batch.mask.new_ones((batch.size, 1))], dim=1)
    after = kv_of(batch)
    for row in batch.rows:
        for j, t in enumerate(after[row]):
            assert torch.equal(t[:, :-1], before[row][j])
            assert torch.all(t[:, -1] == (1 if j % 2 == 0 else -1) * (j // 2 + 1))


def test_a_full_buffer_or_piled_up_padding_falls_back_to_a_rebuild() -> None:
    batch = running_batch()
    batch.merge(batch_of([4, 4, 4, 4], seed=5))  # 9 rows do not fit in 8: rebuilt
    assert batch.size == 9 and batch.cache.layers[0].kbuf.shape[0] == 9
    before = kv_of(batch)
    long_rows = [i for i in range(batch.size) if int(batch.mask[i].sum()) >= 5]
    batch.drop(long_rows)  # a third of the columns is now padding: trimmed by a rebuild
    assert batch.mask.shape[1] == 4
    assert same(kv_of(batch), {r: before[r] for r in batch.rows})


def test_growing_past_the_spare_positions_keeps_the_spare_rows() -> None:
    batch = running_batch()
    batch.drop([4])  # fewer rows than the buffer has room for
    layer = batch.cache.layers[0]
    before, room = kv_of(batch), layer.kbuf.shape[-2]
    step = torch.ones(batch.size, HEADS, 1, DIM)
    for _ in range(room - batch.mask.shape[1] + 1):  # one position past the buffer: re-buffered
        for layer in batch.cache.layers:
            layer.update(step, -step)
        batch.mask = torch.cat([batch.mask, batch.mask.new_ones((batch.size, 1))], dim=1)
    assert batch.cache.layers[0].kbuf.shape[0] == 8 and batch.cache.layers[0].kbuf.shape[-2] > room
    after = kv_of(batch)
    assert all(torch.equal(a[:, :b.shape[1]], b) for r in batch.rows for a, b in zip(after[r], before[r]))
    batch.merge(batch_of([3], seed=6))  # and a row still joins in place
    assert batch.size == 5 and batch.cache.layers[0].kbuf.shape[0] == 8


def shared_batch(lengths: list[int], seed: int, shared_ids: list[int], capacity: int = 0) -> KVBatch:
    """Rows laid out the way a prefill lays them out when they share a prefix: its keys and values
    (the same in every row, seeded by the ids) in the first columns, each row's rest after a hole."""
    batch = batch_of(lengths, seed, capacity)
    n, t = len(shared_ids), batch.mask.shape[1]
    for layer in batch.cache.layers:
        for buf in (layer.keys, layer.values):
            rest = buf.clone()
            buf.zero_()
            for i, length in enumerate(lengths):  # the row's own part moves right of the prefix
                buf[i, :, t - length + n:] = rest[i, :, t - length + n:]
            for j, token in enumerate(shared_ids):  # what position j holding this token computes
                gen = torch.Generator().manual_seed(1000 * j + token)
                buf[:, :, j] = torch.randn(1, HEADS, DIM, generator=gen)
    for i, length in enumerate(lengths):
        batch.mask[i] = torch.tensor([1] * n + [0] * (t - length) + [1] * (length - n))
    batch.shared_ids = list(shared_ids)
    return batch


def assert_shared_columns(batch: KVBatch) -> None:
    n = batch.shared
    assert bool(batch.mask[:, :n].all())
    for layer in batch.cache.layers:
        for buf in (layer.keys, layer.values):
            assert torch.equal(buf[:, :, :n], buf[:1, :, :n].expand_as(buf[:, :, :n]))


@pytest.mark.parametrize("capacity", [8, 0])  # joining in place, and by a rebuild
def test_joining_rows_keep_the_shared_prefix_in_the_same_columns(capacity: int) -> None:
    batch = shared_batch([6, 9], seed=1, shared_ids=[7, 8, 9], capacity=capacity)
    batch.merge(shared_batch([9, 9], seed=2, shared_ids=[7, 8, 9]))  # the first merge rebuilds
    before = kv_of(batch)
    joining = shared_batch([5, 12], seed=3, shared_ids=[7, 8, 9, 4])  # one narrower, one wider row
    expected = {**before, **kv_of(joining)}
    batch.merge(joining)
    assert batch.shared_ids == [7, 8, 9] and batch.mask.shape == (6, 12)
    assert_shared_columns(batch)
    assert same(kv_of(batch), expected)  # every row still holds exactly its keys and values
    batch.drop([0, 3])
    assert batch.shared == 3
    assert_shared_columns(batch)


def test_rows_with_another_prefix_end_the_sharing() -> None:
    batch = shared_batch([6, 9], seed=1, shared_ids=[7, 8, 9], capacity=8)
    batch.merge(shared_batch([5], seed=2, shared_ids=[7, 1]))
    assert batch.shared_ids == [7]
    batch.merge(batch_of([4], seed=3))  # a row without a shared prefix
    assert batch.shared == 0

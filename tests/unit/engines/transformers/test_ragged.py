"""A prefill's rows without their padding (``arft.engines.transformers.ragged``): packing round-trips into the
cache's padded layout, and each row's attention over its own real columns equals attention over
the padded row under its mask."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from arft.engines.transformers.ragged import RaggedRows


def layout() -> tuple[torch.Tensor, torch.Tensor]:
    """3 rows, 4 new tokens each at most, after 5 cache columns: row 0 full, row 1 with 2 new
    tokens and a hole between its cached part and them, row 2 with 1 new token and left padding."""
    new = torch.tensor([[1, 1, 1, 1], [0, 0, 1, 1], [0, 0, 0, 1]])
    cached = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [0, 0, 1, 1, 1]])
    return new, torch.cat([cached, new], dim=1)


def test_pack_and_unpack_keep_the_real_tokens_in_place() -> None:
    new, mask = layout()
    rows = RaggedRows(new, mask)
    ids = torch.arange(12).view(3, 4)
    assert rows.pack(ids).tolist() == [0, 1, 2, 3, 6, 7, 11]
    assert rows.last.tolist() == [3, 5, 6]
    packed = torch.randn(1, 2, 7, 3)
    padded = rows.unpack(packed)
    assert padded.shape == (3, 2, 4, 3)
    assert torch.equal(padded.transpose(1, 2)[new.bool()], packed[0].transpose(0, 1))
    assert not padded.transpose(1, 2)[~new.bool()].any()  # zeros, not garbage, at the padding


def test_dense_rows_are_views() -> None:
    new = torch.ones(2, 3, dtype=torch.long)
    rows = RaggedRows(new, torch.ones(2, 5, dtype=torch.long))
    packed = torch.randn(1, 2, 6, 4)
    assert rows.dense and rows.unpack(packed).data_ptr() == packed.data_ptr()
    assert torch.equal(rows.unpack(packed)[1, :, 2], packed[0, :, 5])


def test_each_row_attends_over_its_real_columns_causally() -> None:
    new, mask = layout()
    rows = RaggedRows(new, mask)
    gen = torch.Generator().manual_seed(0)
    keys, values = torch.randn(3, 2, 9, 8, generator=gen), torch.randn(3, 2, 9, 8, generator=gen)
    query = torch.randn(1, 4, 7, 8, generator=gen)  # 4 query heads over 2 key/value heads
    got = rows.attend(query, keys, values, scale=0.3).view(1, 7, 4, 8)
    # reference: the padded layout, each query over the real columns up to its own
    padded_q = rows.unpack(query)  # [3, 4, 4, 8]
    keep = mask.bool()[:, None, None, :] & torch.ones(4, 9, dtype=torch.bool).tril(5)
    want = F.scaled_dot_product_attention(padded_q, keys.repeat_interleave(2, 1), values.repeat_interleave(2, 1),
                                          attn_mask=keep, scale=0.3)  # [3, 4, 4, 8]
    want = want.transpose(1, 2)[new.bool()]  # [7, 4, 8]
    assert torch.allclose(got[0], want, atol=1e-5)


def test_a_row_without_new_tokens_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one new token"):
        RaggedRows(torch.tensor([[1, 1], [0, 0]]), torch.ones(2, 4, dtype=torch.long))

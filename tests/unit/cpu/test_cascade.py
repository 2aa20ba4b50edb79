"""Cascade attention equals attention over whole rows (sdpa), and falls back to sdpa wherever it
does not apply."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from arft.cpu import attention
from arft.cpu import cascade
from arft.cpu import patch
from arft.cpu.attention import attention as arft_attention
from arft.cpu.cascade import KEYWORD, MIN_SHARED

B, HQ, HKV, DIM, T, SHARED = 5, 6, 2, 16, 48, 20


class Module:
    """What an attention function reads off its module."""

    num_key_value_groups = HQ // HKV
    is_causal = True


def inputs(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One decode query per row; keys/values whose first ``SHARED`` positions are equal in every
    row; a padding mask with holes after the shared columns."""
    gen = torch.Generator().manual_seed(seed)
    query = torch.randn(B, HQ, 1, DIM, generator=gen)
    key, value = (torch.randn(B, HKV, T, DIM, generator=gen) for _ in range(2))
    key[:, :, :SHARED] = key[:1, :, :SHARED]
    value[:, :, :SHARED] = value[:1, :, :SHARED]
    mask = torch.rand(B, 1, 1, T, generator=gen) < 0.6
    mask[..., :SHARED] = True
    mask[..., -1] = True  # the token being decoded
    return query, key, value, mask


def sdpa(query: Any, key: Any, value: Any, mask: Any) -> torch.Tensor:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(Module(), query, key, value, mask, scaling=DIM ** -0.5)[0]


@pytest.mark.parametrize("mask_kind", ["bool", "none", "additive", "bfloat16"])
def test_equals_attention_over_whole_rows(mask_kind: str) -> None:
    query, key, value, mask = inputs(0)
    if mask_kind == "none":
        mask = None
    elif mask_kind == "additive":
        mask = torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(torch.float32).min)
    elif mask_kind == "bfloat16":  # the output keeps the query's dtype (the merge runs in float32)
        query, key, value = (x.bfloat16() for x in (query, key, value))
    want = sdpa(query, key, value, mask)
    got, _ = arft_attention(Module(), query, key, value, mask, scaling=DIM ** -0.5, **{KEYWORD: SHARED})
    assert got.shape == want.shape == (B, 1, HQ, DIM)
    assert got.dtype == want.dtype == query.dtype
    assert torch.allclose(got.float(), want.float(), atol=1e-5 if mask_kind != "bfloat16" else 2e-2)


def test_reads_only_row_zeros_prefix() -> None:
    # the proof that the prefix is read once: other rows' prefix columns are never looked at
    query, key, value, mask = inputs(1)
    want = sdpa(query, key, value, mask)
    key[1:, :, :SHARED] = float("nan")
    value[1:, :, :SHARED] = float("nan")
    got, _ = arft_attention(Module(), query, key, value, mask, scaling=DIM ** -0.5, **{KEYWORD: SHARED})
    assert torch.allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("case", ["short prefix", "one row", "no keyword", "needs grad"])
def test_falls_back_to_sdpa(case: str) -> None:
    query, key, value, mask = inputs(2)
    kwargs: dict[str, Any] = {KEYWORD: SHARED}
    if case == "short prefix":
        kwargs = {KEYWORD: MIN_SHARED - 1}
    elif case == "one row":
        query, key, value, mask = query[:1], key[:1], value[:1], mask[:1]
    elif case == "no keyword":
        kwargs = {}
    elif case == "needs grad":  # the trainer's passes
        query.requires_grad_()
    key[1:, :, :SHARED] = float("nan")  # sdpa reads every row: NaN comes through
    got, _ = arft_attention(Module(), query, key, value, mask, scaling=DIM ** -0.5, **kwargs)
    want = sdpa(query, key, value, mask)
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got[~got.isnan()], want[~want.isnan()])  # exactly sdpa, not a rearrangement


@pytest.mark.parametrize("mask_kind", ["bool", "additive"])
def test_grouped_prefill_equals_sdpa(mask_kind: str) -> None:
    # an engine prefill of 4 new tokens per row after a cached history, padded rows included
    query = torch.randn(B, HQ, 4, DIM)
    _, key, value, mask = inputs(3)
    causal = torch.ones(4, T, dtype=torch.bool).tril(T - 4)
    mask = mask.expand(B, 1, 4, T) & causal
    mask[0, :, :, :T - 4] = False  # a row that is all padding before its new tokens
    if mask_kind == "additive":
        mask = torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(torch.float32).min)
    got, _ = arft_attention(Module(), query, key, value, mask, scaling=DIM ** -0.5, **{KEYWORD: 0})
    want = sdpa(query, key, value, mask)
    assert got.shape == want.shape == (B, 4, HQ, DIM)
    assert torch.allclose(got, want, atol=1e-5)


def test_enable_switches_only_sdpa_models(tokenizer: Any) -> None:
    from arft.models.loading import tiny_model

    model = tiny_model(tokenizer)
    model.set_attn_implementation("sdpa")
    assert patch.install(model, train=False).attention and model.config._attn_implementation == attention.NAME
    assert patch.install(model, train=False).attention  # already on
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():  # no keyword: exactly sdpa
        on = model(input_ids=ids).logits
        model.set_attn_implementation("sdpa")
        assert torch.equal(on, model(input_ids=ids).logits)
    model.set_attn_implementation("eager")
    assert not patch.install(model, train=False).attention and model.config._attn_implementation == "eager"


def holes(firsts: list[int], shared: int = SHARED) -> torch.Tensor:
    """A decode step's ``[B, T]`` mask: row i real from column ``firsts[i]`` (right-aligned rows,
    as the engine keeps them), the ``shared`` columns real in every row."""
    mask = torch.zeros(len(firsts), T, dtype=torch.long)
    for i, first in enumerate(firsts):
        mask[i, first:] = 1
    mask[:, :shared] = 1
    return mask


def test_hole_split_reads_the_fewest_columns() -> None:
    # two long rows from the start of their own columns, three short ones from column 40 of 48
    split = cascade.hole_split(holes([SHARED, 40, SHARED + 1, 40, 41]), SHARED)
    assert split is not None and (split.start, split.at) == (SHARED, 40)
    assert torch.equal(split.rows, torch.tensor([0, 2]))  # gathered: not a run of rows
    split = cascade.hole_split(holes([SHARED, SHARED, 40, 40, 41]), SHARED)
    assert split is not None and split.rows == slice(0, 2)  # a run of rows: a view, no gather
    split = cascade.hole_split(holes([40, 40, 40, 41, 44]), SHARED)
    assert split is not None and split.at == 40 and split.rows == slice(0, 0)  # common leading hole
    # a prefix too short to read once: the split starts after it all the same
    split = cascade.hole_split(holes([4, 40, 4, 40, 41], shared=4), 4)
    assert split is not None and (split.start, split.at) == (4, 40)
    split = cascade.hole_split(holes([0, 40, 0, 40, 41], shared=0), 0)
    assert split is not None and (split.start, split.at) == (0, 40)
    assert cascade.hole_split(holes([SHARED, SHARED + 1, SHARED + 2, 24, 22]), SHARED) is None  # < 20 % skipped
    assert cascade.hole_split(holes([SHARED]), SHARED) is None


@pytest.mark.parametrize("firsts", [[SHARED, 40, SHARED + 1, 40, 41], [SHARED, SHARED, 40, 40, 41],
                                    [40, 40, 40, 41, 44], [SHARED + 3, 44, 44, 30, 46]])
@pytest.mark.parametrize("shared", [SHARED, MIN_SHARED - 1, 0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_attention_that_skips_holes_equals_attention_over_whole_rows(firsts: list[int], shared: int,
                                                                     dtype: torch.dtype) -> None:
    query, key, value, _ = inputs(4)
    key[:, :, :shared] = key[:1, :, :shared]
    value[:, :, :shared] = value[:1, :, :shared]
    query, key, value = (x.to(dtype) for x in (query, key, value))
    step_mask = holes([max(f, shared) for f in firsts], shared)
    step_mask[:, T - 3] = 0  # a hole inside every row too, after its first real column
    mask = step_mask.bool()[:, None, None, :]
    split = cascade.hole_split(step_mask, shared)
    assert split is not None and split.start == shared and split.shape == (B, T)
    want = sdpa(query, key, value, mask)
    for m in (mask, torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, float("-inf"))):
        got = cascade.attend(query, key, value, m, shared, DIM ** -0.5, split)
        assert got.dtype == dtype
        assert torch.allclose(got.float(), want.float(), atol=1e-5 if dtype == torch.float32 else 2e-2)
    # the holes are not read: NaN there changes nothing (sdpa over whole rows would give NaN)
    key, value = key.clone(), value.clone()
    rows = split.rows
    chosen = set(range(B)[rows]) if isinstance(rows, slice) else set(rows.tolist())
    for row in set(range(B)) - chosen:
            key[row, :, split.start:split.at] = float("nan")
            value[row, :, split.start:split.at] = float("nan")
    got = cascade.attend(query, key, value, mask, shared, DIM ** -0.5, split)
    assert torch.allclose(got.float(), want.float(), atol=1e-5 if dtype == torch.float32 else 2e-2)


def test_a_split_made_for_other_columns_is_not_used() -> None:
    query, key, value, _ = inputs(5)
    step_mask = holes([SHARED, 40, SHARED + 1, 40, 41])
    mask = step_mask.bool()[:, None, None, :]
    split = cascade.hole_split(step_mask, 0)  # made for whole rows, the call below reads 20 shared
    assert split is None  # the shared columns are real in every row: no hole from column 0
    for split in (cascade.Split(0, 40, slice(0, 1), (B, T)),  # other columns
                  cascade.Split(SHARED, 40, slice(0, 1), (B - 1, T)),  # another batch
                  cascade.Split(SHARED, 40, slice(0, 1), (B, T - 1))):  # another width
        got = cascade.attend(query, key, value, mask, SHARED, DIM ** -0.5, split)
        assert torch.allclose(got, sdpa(query, key, value, mask), atol=1e-5)
    # the same split made for this step's shape is used, and leaves out row 2's real columns
    wrong = cascade.attend(query, key, value, mask, SHARED, DIM ** -0.5, cascade.Split(SHARED, 40, slice(0, 1), (B, T)))
    assert not torch.allclose(wrong, sdpa(query, key, value, mask), atol=1e-3)

"""Per-row truncation and sampling on hand-made distributions."""

from __future__ import annotations

import math

import torch

from arft.engines.transformers.sampling import RowSampling, sample_rows, truncate

PROBS = torch.tensor([0.5, 0.3, 0.15, 0.05])


def test_truncate_per_row_top_k_and_top_p() -> None:
    logp = PROBS.log().repeat(4, 1)
    out = truncate(logp, top_p=torch.tensor([1.0, 1.0, 0.7, 0.8]), top_k=torch.tensor([0, 2, 0, 1]))
    kept = torch.isfinite(out).tolist()
    assert kept[0] == [True, True, True, True]  # no filter
    assert kept[1] == [True, True, False, False]  # top-k 2
    assert kept[2] == [True, True, False, False]  # 0.5 < 0.7, 0.5 + 0.3 >= 0.7
    assert kept[3] == [True, False, False, False]  # top-k 1 wins over top-p 0.8
    assert torch.equal(out[1][:2], logp[1][:2])


def test_logprob_is_of_the_untruncated_tempered_distribution() -> None:
    logits = PROBS.log().unsqueeze(0)
    gen = torch.Generator().manual_seed(0)
    tokens, lps = sample_rows(logits, [RowSampling(temperature=0.5, top_k=1)], [gen])
    assert tokens.tolist() == [0]
    expected = torch.log_softmax(logits / 0.5, -1)[0, 0].item()
    assert math.isclose(lps.item(), expected, abs_tol=1e-6)


def test_greedy_rows_and_sampled_rows_mix() -> None:
    logits = PROBS.log().repeat(2, 1)
    logits[1] = logits[1].flip(0)
    gen = torch.Generator().manual_seed(0)
    counts = torch.zeros(4)
    for _ in range(2000):
        tokens, _ = sample_rows(logits, [RowSampling(temperature=0), RowSampling(top_p=0.99)], [None, None], gen)
        assert tokens[0].item() == 0
        counts[tokens[1]] += 1
    share = counts / counts.sum()
    assert torch.allclose(share, PROBS.flip(0), atol=0.04)  # follows the distribution


def test_top_p_candidate_shortcut_equals_full_sort() -> None:
    from arft.engines.transformers.sampling import _top_p_keep

    torch.manual_seed(0)
    logp = torch.log_softmax(torch.randn(6, 500) * torch.tensor([[0.5], [1], [2], [4], [8], [1]]), -1)
    top_p = torch.tensor([0.9, 0.5, 0.95, 0.3, 0.99, 1.0])
    use_p = top_p < 1
    full = _top_p_keep(logp, top_p, use_p, candidates=500)
    for k in (1, 8, 64):  # few candidates: some rows need the fallback sort, some do not
        assert torch.equal(_top_p_keep(logp, top_p, use_p, candidates=k), full)
    assert full[5].all() and full.sum(-1)[:5].lt(500).all()

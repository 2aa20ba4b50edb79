"""Per-row next-token sampling for a batch of independent requests.

Each row of a decode batch may carry its own temperature, top-p, top-k and random generator, so
requests with different ``SamplingParams`` share one forward pass. The recorded logprob of a token
is ``log_softmax(logits / temperature)[token]`` over the *untruncated* distribution (temperature
0 is greedy and is recorded at temperature 1), which is what a trainer recomputes from its own
logits (see ``arft.engines.base.Generation``).

torch is imported lazily: this module only runs inside the engine's worker thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class RowSampling:
    """The sampling settings of one batch row (``temperature <= 0`` means greedy)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0


def truncate(logprobs: "torch.Tensor", top_p: "torch.Tensor", top_k: "torch.Tensor") -> "torch.Tensor":
    """``logprobs`` with tokens outside each row's top-k / top-p set to ``-inf``.

    ``top_k[i] == 0`` and ``top_p[i] >= 1`` disable the filters for row ``i``. Top-p keeps the
    smallest prefix of the sorted distribution whose mass reaches ``top_p`` (at least one token).
    """
    import torch

    out = logprobs
    use_k = top_k > 0
    if bool(use_k.any()):
        k_max = int(top_k.max())
        kth = torch.topk(out, min(k_max, out.shape[-1]), dim=-1).values
        idx = (top_k.clamp(min=1, max=kth.shape[-1]) - 1).unsqueeze(-1)
        threshold = kth.gather(-1, idx)
        threshold = torch.where(use_k.unsqueeze(-1), threshold, torch.full_like(threshold, -float("inf")))
        out = out.masked_fill(out < threshold, -float("inf"))
    use_p = top_p < 1.0
    if bool(use_p.any()):
        out = out.masked_fill(~_top_p_keep(out, top_p, use_p), -float("inf"))
    return out


def _top_p_keep(logprobs: "torch.Tensor", top_p: "torch.Tensor", use_p: "torch.Tensor",
                candidates: int = 1024) -> "torch.Tensor":
    """Boolean ``[B, V]``: the tokens each row's nucleus keeps (all of them where top-p is off).

    A full sort of a 50k vocabulary costs ~40 ms per batch on a CPU; the nucleus almost always
    lies within the top ``candidates`` tokens, so those are ranked first and the full sort is
    only the fallback for rows whose top candidates do not reach ``top_p``.
    """
    import torch

    probs = logprobs.softmax(-1)
    k = min(candidates, probs.shape[-1])
    ranked, order = probs.topk(k, dim=-1) if k < probs.shape[-1] else probs.sort(-1, descending=True)
    if k < probs.shape[-1] and bool((ranked.sum(-1) < top_p)[use_p].any()):
        ranked, order = probs.sort(-1, descending=True)
    mass_before = ranked.cumsum(-1) - ranked
    # A token is dropped when the tokens ranked above it already reach top_p; tokens outside the
    # ranked candidates have at least the candidates' whole mass above them.
    keep_ranked = mass_before < top_p.unsqueeze(-1)
    keep_ranked[..., 0] = True
    keep = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order, keep_ranked)
    return keep | ~use_p.unsqueeze(-1)


def sample_rows(
    logits: "torch.Tensor",
    rows: Sequence[RowSampling],
    generators: Sequence["torch.Generator | None"],
    default_generator: "torch.Generator | None" = None,
) -> tuple["torch.Tensor", "torch.Tensor"]:
    """Sample one token per row of ``logits`` ``[B, V]``; returns ``(tokens [B], logprobs [B])``.

    Rows with their own generator draw from it (so a seeded request's draws do not depend on its
    batch-mates); the other sampled rows share one batched draw from ``default_generator``.
    """
    import torch

    device = logits.device
    logits = logits.float()
    temps = [r.temperature if r.temperature > 0 else 1.0 for r in rows]
    scaled = logits
    if any(t != 1.0 for t in temps):  # skip a [B, V] division in the common temperature-1 case
        scaled = logits / torch.tensor(temps, dtype=torch.float32, device=device).unsqueeze(-1)
    logprobs = torch.log_softmax(scaled, dim=-1)
    tokens = torch.empty(len(rows), dtype=torch.long, device=device)
    sampled = [i for i, r in enumerate(rows) if r.temperature > 0]
    greedy = [i for i, r in enumerate(rows) if r.temperature <= 0]
    if greedy:
        idx = torch.tensor(greedy, device=device)
        tokens[idx] = logits[idx].argmax(dim=-1)
    if sampled:
        whole = len(sampled) == len(rows)
        idx = torch.tensor(sampled, device=device)
        top_p = torch.tensor([rows[i].top_p for i in sampled], dtype=torch.float32, device=device)
        top_k = torch.tensor([rows[i].top_k for i in sampled], dtype=torch.long, device=device)
        kept = truncate(logprobs if whole else logprobs[idx], top_p, top_k)
        draws = _draw(kept, [generators[i] for i in sampled], default_generator)
        if whole:
            tokens = draws
        else:
            tokens[idx] = draws
    chosen = logprobs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    return tokens, chosen


def _draw(
    logprobs: "torch.Tensor",
    generators: Sequence["torch.Generator | None"],
    default_generator: "torch.Generator | None",
) -> "torch.Tensor":
    """One draw per row from ``exp(logprobs)`` (``-inf`` = excluded) by inverting the CDF.

    Cheaper than ``torch.multinomial`` over a large vocabulary (one cumsum and a binary search
    instead of an exponential variate per token). Seeded rows take their uniform from their own
    generator; the rest share one call on ``default_generator``.
    """
    import torch

    n = logprobs.shape[0]
    u = torch.empty(n, dtype=torch.float64, device=logprobs.device)
    shared = [i for i, g in enumerate(generators) if g is None]
    if shared:
        draws = torch.rand(len(shared), generator=default_generator, dtype=torch.float64, device=u.device)
        u[torch.tensor(shared, device=u.device)] = draws
    for i, g in enumerate(generators):
        if g is not None:
            u[i] = torch.rand((), generator=g, dtype=torch.float64, device=u.device)
    cdf = logprobs.exp().cumsum(dim=-1)
    # 1 - u lies in (0, 1]: the target is > 0, so it never lands on a zero-probability token.
    target = ((1.0 - u).unsqueeze(-1) * cdf[:, -1:]).to(cdf.dtype)
    return torch.searchsorted(cdf, target).squeeze(-1).clamp(max=logprobs.shape[-1] - 1)

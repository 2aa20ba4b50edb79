"""Rollouts -> TrainBatch -> padded tensors. The only place rollouts become training data.

The trainer sees token ids, the loss mask (1 on sampled assistant tokens only), the engine's
logprobs of those tokens and one advantage per sequence — nothing about tools or templates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from arft.models.token_ids import common_prefix
from arft.records import Rollout, TrainBatch
from arft.trainer.shared_prefix import MIN_PREFIX

if TYPE_CHECKING:
    import torch


def to_train_batch(rollouts: Sequence[Rollout], advantages: Sequence[float | None]) -> TrainBatch:
    """The rollouts that train: an advantage, token ids and at least one sampled token.

    Infra-failed rollouts must already have ``None`` advantages (they were never graded); they
    are checked again here because an infrastructure failure must add nothing to the gradient.
    A rollout whose history was rewritten (``Rollout.segments``, an agent program through the
    gateway) gives one sequence per segment, each with the rollout's advantage.
    """
    keep = [(seg, float(a), r) for r, a in zip(rollouts, advantages, strict=True)
            if a is not None and r.status != "infra_failed"
            for seg in r.token_segments if any(seg.loss_mask)]
    return TrainBatch(
        input_ids=tuple(s.token_ids for s, _, _ in keep), loss_mask=tuple(s.loss_mask for s, _, _ in keep),
        old_logprobs=tuple(s.logprobs for s, _, _ in keep), advantages=tuple(a for _, a, _ in keep),
        trace_ids=tuple(r.trace_id for _, _, r in keep),
        behaviour_known=tuple(r.rescued != "none" for _, _, r in keep))


@dataclass
class Tensors:
    """One micro-batch, right-padded: ``[B, T]`` tensors plus ``[B]`` advantages.

    ``targets``/``target_mask``/``old_logprobs`` are shifted by one: position ``t`` holds the
    token predicted from the logits at ``t``.
    """

    input_ids: "torch.Tensor"
    attention_mask: "torch.Tensor"
    target_mask: "torch.Tensor"
    targets: "torch.Tensor"
    old_logprobs: "torch.Tensor"
    advantages: "torch.Tensor"
    behaviour_known: "torch.Tensor | None" = None
    """``[B]`` bool: False for a row whose recorded logprobs are not its sampler's
    (``TrainBatch.behaviour_known``); None: all known."""

    @property
    def n_tokens(self) -> int:
        return int(self.target_mask.sum())


def groups_by_length(lengths: Sequence[int], size: int, max_tokens: int | None = None) -> list[list[int]]:
    """Indices of ``lengths`` in micro-batches: sorted by length (each pads little), at most
    ``size`` sequences and, with ``max_tokens``, at most that many padded tokens (sequences ×
    the longest) each; a sequence longer than ``max_tokens`` goes alone."""
    groups: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        g = groups[-1] if groups else None
        if g is not None and len(g) < size and (max_tokens is None or (len(g) + 1) * lengths[i] <= max_tokens):
            g.append(i)
        else:
            groups.append([i])
    return groups


def groups_sharing_prefixes(ids: Sequence[Sequence[int]], size: int, max_tokens: int | None = None,
                            min_prefix: int = MIN_PREFIX) -> list[list[int]]:
    """Micro-batches for an update that runs a micro-batch's common prefix once
    (``training.share_prefix``): sequences that start with at least ``min_prefix`` equal tokens
    go together, each micro-batch at most ``size`` sequences and ``max_tokens`` tokens *run*: the
    common prefix once plus every row's rest padded to the longest (what activation memory and
    compute grow with). Sequences that share no such prefix are grouped by ``groups_by_length``."""
    order = sorted(range(len(ids)), key=lambda i: tuple(ids[i]))  # a shared prefix makes neighbours
    clusters: list[list[int]] = []
    for prev, i in zip([None, *order], order):
        if prev is not None and common_prefix(ids[prev], ids[i]) >= min_prefix:
            clusters[-1].append(i)
        else:
            clusters.append([i])
    alone = [i for c in clusters if len(c) == 1 for i in c]
    groups = [[alone[j] for j in g] for g in groups_by_length([len(ids[i]) for i in alone], size, max_tokens)]
    for cluster in (c for c in clusters if len(c) > 1):
        groups += _pack_sharing(ids, sorted(cluster, key=lambda i: len(ids[i])), size, max_tokens, min_prefix)
    return groups


def _pack_sharing(ids: Sequence[Sequence[int]], members: list[int], size: int,
                  max_tokens: int | None, min_prefix: int) -> list[list[int]]:
    """Greedy micro-batches of one cluster (sorted by length), bounded by tokens run (a prefix
    shorter than ``min_prefix`` is not shared: then every row runs whole)."""
    groups: list[list[int]] = []
    prefix = 0
    for i in members:
        g = groups[-1] if groups else None
        if g is not None and len(g) < size:
            p = min(prefix, common_prefix(ids[g[0]], ids[i]), len(ids[g[0]]) - 1)  # each row keeps a token
            run = (len(g) + 1) * len(ids[i]) if p < min_prefix else p + (len(g) + 1) * (len(ids[i]) - p)
            if max_tokens is None or run <= max_tokens:
                g.append(i)
                prefix = p
                continue
        groups.append([i])
        prefix = len(ids[i])
    return groups


def micro_batches(batch: TrainBatch, size: int, pad_id: int = 0, max_tokens: int | None = None,
                  share_prefix: bool = False) -> list[Tensors]:
    """Split ``batch`` into right-padded micro-batches of at most ``size`` sequences and
    ``max_tokens`` tokens each: padded tokens (``groups_by_length``), or with ``share_prefix``
    tokens run with the common prefix once (``groups_sharing_prefixes``)."""
    import torch

    if share_prefix:
        groups = groups_sharing_prefixes(batch.input_ids, size, max_tokens)
    else:
        groups = groups_by_length([len(ids) for ids in batch.input_ids], size, max_tokens)
    out = []
    for idx in groups:
        t = max(len(batch.input_ids[i]) for i in idx)
        ids = torch.full((len(idx), t), pad_id, dtype=torch.long)
        attn = torch.zeros((len(idx), t), dtype=torch.long)
        mask = torch.zeros((len(idx), t), dtype=torch.float32)
        old = torch.zeros((len(idx), t), dtype=torch.float32)
        for row, i in enumerate(idx):
            n = len(batch.input_ids[i])
            ids[row, :n] = torch.tensor(batch.input_ids[i])
            attn[row, :n] = 1
            mask[row, :n] = torch.tensor(batch.loss_mask[i], dtype=torch.float32)
            old[row, :n] = torch.tensor(batch.old_logprobs[i], dtype=torch.float32)
        known = None
        if batch.behaviour_known and not all(batch.behaviour_known[i] for i in idx):
            known = torch.tensor([batch.behaviour_known[i] for i in idx], dtype=torch.bool)
        out.append(Tensors(
            input_ids=ids, attention_mask=attn, targets=ids[:, 1:], target_mask=mask[:, 1:],
            old_logprobs=old[:, 1:], advantages=torch.tensor([batch.advantages[i] for i in idx]),
            behaviour_known=known))
    return out

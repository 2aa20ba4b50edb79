"""The inputs of one prefill forward pass that reuses stored keys and values.

``TransformersEngine`` admits several requests at once. For each *distinct* prompt (the K
samples of one task send the same one and are run once, then copied), the prefix store gives the
longest prefix already computed; only the rest (the suffix) is run. Row ``u`` with ``c_u``
cached tokens and ``s_u`` suffix tokens is laid out in a batch of width ``Wc + S`` (``Wc`` the
longest cached prefix, ``S`` the longest suffix)::

    cache columns [0, Wc):      the row's cached K/V at [0, c_u), then padding
    input columns [Wc, Wc + S): padding, then the row's suffix at [Wc + S - s_u, Wc + S)

The attention mask is 1 exactly on real tokens (so a row may hold a masked hole between its
cached part and its suffix) and position ids are the real positions ``c_u + arange(s_u)``, so
the model sees the same sequence it would see without the store. The suffix's own keys and
values are appended by the forward pass as usual. Cached parts are left-aligned so that the
tokens all prompts start with sit in the same columns of every row (``shared_ids``: cascade
attention reads them once).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from arft.engines.transformers.prefix_cache import PrefixCache, PrefixEntry
from arft.models.token_ids import common_prefix_of_all

if TYPE_CHECKING:
    import torch

SHARED_PREFIX_MIN_TOKENS = 16
"""A prefix common to all distinct prompts of an admission is run once on its own first when it
is at least this much longer than what the store already has for them."""


@dataclass
class PrefillPlan:
    """One prefill forward pass: ``ids``/``positions`` ``[U, S]``, ``mask`` ``[U, Wc + S]``, a
    cache preloaded with the reused prefixes, and ``expand[i]``: the distinct row of request i."""

    ids: "torch.Tensor"
    positions: "torch.Tensor"
    mask: "torch.Tensor"
    cache: Any
    expand: list[int]
    computed_tokens: int
    """Prompt tokens the forward pass runs (reused and duplicate prompts' tokens excluded)."""
    shared_ids: list[int]
    """Tokens every row holds, cached, in its first columns (see ``KVBatch.shared_ids``)."""


def distinct(prompts: list[list[int]]) -> tuple[list[list[int]], list[int]]:
    """The distinct prompts, in first-seen order, and each prompt's index among them."""
    index: dict[tuple[int, ...], int] = {}
    expand = []
    for p in prompts:
        expand.append(index.setdefault(tuple(p), len(index)))
    return [list(k) for k in index], expand


def shared_prefix(prompts: list[list[int]], store: PrefixCache | None) -> list[int] | None:
    """The prefix common to every prompt, when worth running once on its own (see
    ``SHARED_PREFIX_MIN_TOKENS``); None otherwise."""
    if len(prompts) < 2 or store is None:
        return None
    n = min(common_prefix_of_all(prompts), min(len(p) for p in prompts) - 1)  # each keeps a token to run
    reused = max(store.reusable(p) for p in prompts)
    return prompts[0][:n] if n - reused >= SHARED_PREFIX_MIN_TOKENS else None


def seeded_heads(prompts: list[list[int]], store: PrefixCache | None) -> list[list[int]]:
    """Each distinct seeded prompt less its last token, where the store does not hold that much.

    Run and stored first, they make a seeded prompt's first token always come from the same
    pass: its last token alone over the stored rest, which is what a repeat of the prompt runs
    (the store then holds all but that token). A cold prompt run whole would give logits that
    differ in the last bits, enough to change a temperature-1 sample of the same seed."""
    if store is None:  # no reuse: every prompt runs whole, every time
        return []
    return [p[:-1] for p in distinct(prompts)[0] if len(p) > 1 and store.reusable(p) < len(p) - 1]


def plan(prompts: list[list[int]], store: PrefixCache | None, device: "torch.device",
         cache: Any) -> PrefillPlan:
    """Look up every distinct prompt in ``store`` and lay out the forward pass (module doc).
    ``cache`` is an empty ``DynamicCache`` to preload. ``store=None``: no reuse at all, not even
    of a prompt sent twice in one admission."""
    import torch

    if store is None:  # reuse off: every prompt runs in full
        unique, expand = prompts, list(range(len(prompts)))
    else:
        unique, expand = distinct(prompts)
    hits: list[tuple[PrefixEntry | None, int]] = [
        store.lookup(p) if store is not None else (None, 0) for p in unique]
    wc = max(c for _, c in hits)
    width = max(len(p) - c for p, (_, c) in zip(unique, hits))
    ids = torch.zeros((len(unique), width), dtype=torch.long)
    positions = torch.zeros((len(unique), width), dtype=torch.long)
    mask = torch.zeros((len(unique), wc + width), dtype=torch.long)
    for u, (p, (_, c)) in enumerate(zip(unique, hits)):
        s = len(p) - c
        ids[u, width - s:] = torch.tensor(p[c:])
        positions[u, width - s:] = torch.arange(c, len(p))
        mask[u, :c] = 1
        mask[u, wc + width - s:] = 1
    if wc:
        _preload(cache, hits, wc, device)
    computed = sum(len(p) - c for p, (_, c) in zip(unique, hits))
    lead = min(common_prefix_of_all(unique), *(c for _, c in hits))
    return PrefillPlan(ids.to(device), positions.to(device), mask.to(device), cache, expand, computed,
                       unique[0][:lead])


def _preload(cache: Any, hits: list[tuple[PrefixEntry | None, int]], wc: int,
             device: "torch.device") -> None:
    """Write each row's reused keys and values, left-aligned at ``[0, c)``, into ``cache``."""
    template = next(e for e, _ in hits if e is not None).kv
    for layer, (k0, v0) in enumerate(template):
        heads, _, dim = k0.shape
        keys = k0.new_zeros((len(hits), heads, wc, dim), device=device)
        values = v0.new_zeros((len(hits), heads, wc, dim), device=device)
        for u, (entry, c) in enumerate(hits):
            if entry is not None and c:
                k, v = entry.kv[layer]
                keys[u, :, :c] = k[:, :c]
                values[u, :, :c] = v[:, :c]
        cache.update(keys, values, layer)

"""Linear layers run on oneDNN with prepacked weights in the engine's small passes.

A decode step multiplies a few dozen rows by every weight matrix of the model. At that shape the
default CPU matmul (``F.linear``) reaches about half of what the CPU can do; oneDNN's
``mkldnn._linear_pointwise`` with its weights reordered once into its blocked layout (what
``torch.compile`` freezing does) runs 1.5-2x faster: measured on a 2-core AVX2 CPU at 32 rows,
the 49k-vocabulary LM head 30 -> 15 ms and the MLP projections 0.72 -> 0.45 ms. For large row
counts (a long prefill, the trainer's passes) the two are even, so those keep ``F.linear``.

``enable(model)`` makes every plain ``nn.Linear`` of the model (peft's base layers and adapters
included) a ``PackedLinear``, which takes the packed path only inside ``packed_passes()`` on the
same thread, for inputs of at most ``MAX_ROWS`` rows that need no gradient; every other call (the
trainer, a long prefill) is ``F.linear`` as before. A packed weight is redone when its parameter
changes as ``hf_model.param_state`` sees it (optimizer steps, ``load_state_dict``, ``copy_``, a
replaced parameter or ``.data``, a cast). In-place writes into ``.data`` (peft's adapter merge) are
not seen: whoever writes weights that way calls ``forget`` (``TransformersEngine``'s
``clear_prefix_cache`` does; packing the whole embedded model again takes ~0.4 s). The packs cost
one more copy of the model's linear weights in memory until ``forget`` (closing the engine calls
it). ``packed(owner, weights)`` packs several weights stacked as one (``arft.engines.transformers.fused_pass``
runs q, k and v, and gate and up, as one product each). Results equal ``F.linear`` within float
rounding (~1e-4 on logits), as a change of batch shape does.
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from arft.cpu import patch
from arft.models.hf_model import param_state

if TYPE_CHECKING:
    import torch

MAX_ROWS = 512
"""Inputs with more rows than this (long prefills) keep ``F.linear``: beyond it oneDNN does not pay."""
ROWS_HINT = 32
"""The batch size the packed layout is tuned for (the engine's default decode batch)."""
DTYPES = ("float32", "bfloat16")
"""The weight dtypes packed; bfloat16 only where the CPU runs oneDNN's bf16 path (``supports``)."""


def available() -> bool:
    """Whether this torch build has oneDNN's packed linear (CPU builds with mkldnn do)."""
    import torch

    return bool(torch.backends.mkldnn.is_available()) and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")


@functools.cache
def supports(dtype: "torch.dtype") -> bool:
    """Whether oneDNN packs and multiplies ``dtype`` weights on this CPU (bf16 needs AVX512 or
    AVX-NE-CONVERT; oneDNN says so by raising, which is caught here)."""
    import torch

    if str(dtype).removeprefix("torch.") not in DTYPES or not available():
        return False
    try:
        weight = torch.ones(8, 8, dtype=dtype)
        packed = torch.ops.mkldnn._reorder_linear_weight(weight, 1)
        torch.ops.mkldnn._linear_pointwise(weight, packed, None, "none", [], "")
    except RuntimeError:
        return False
    return True


def enable(model: Any) -> int:
    """Make the model's CPU ``nn.Linear`` layers ``PackedLinear`` (their class is swapped, as
    ``torch.nn.utils.parametrize`` does; weights and state dicts are untouched); returns how
    many have the packed path (0 when oneDNN is missing, the model is not on the CPU or not in a
    dtype this CPU packs)."""
    import torch

    packed_class = _packed_class()
    count = 0
    for module in model.modules():
        if type(module) not in (torch.nn.Linear, packed_class) or module.weight.device.type != "cpu":
            continue
        if supports(module.weight.dtype):
            module.__class__ = packed_class
            count += 1
    return count


@contextlib.contextmanager
def packed_passes() -> Iterator[None]:
    """Within this block, on this thread, enabled layers take the packed path."""
    with patch.PACKED_PASSES.on():
        yield


def packed_weight(module: "torch.nn.Module") -> "torch.Tensor | None":
    """The packed copy of ``module``'s weight, if a packed pass made one."""
    entry = patch.PACKS.get(module)
    return None if entry is None else entry[2]


def forget(model: Any) -> None:
    """Drop the packs of ``model``'s layers (weights written where ``param_state`` cannot see it,
    or memory to free); the next packed pass packs again."""
    for module in model.modules():
        patch.PACKS.pop(module, None)


@functools.cache
def _packed_class() -> type:
    import torch

    class PackedLinear(torch.nn.Linear):
        """``nn.Linear`` that takes the packed path inside ``packed_passes`` (module doc)."""

        plain_linear = True
        """Its weight is an ``nn.Linear``'s and every pass needing a gradient is ``F.linear``: the
        trainer may compute with it as with ``nn.Linear`` (``arft.cpu.ops.lora``)."""

        def forward(self, x: "torch.Tensor") -> "torch.Tensor":
            return _forward(self, x)

    PackedLinear.__module__, PackedLinear.__qualname__ = __name__, "PackedLinear"
    return PackedLinear


def __getattr__(name: str) -> Any:
    """``PackedLinear`` is made on first use (torch is imported lazily); pickles name it."""
    if name == "PackedLinear":
        return _packed_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _forward(self: "torch.nn.Linear", x: "torch.Tensor") -> "torch.Tensor":
    import torch
    import torch.nn.functional as F

    weight, bias = self.weight, self.bias
    if not patch.PACKED_PASSES:  # the trainer, HF generate: nothing else is looked at
        return F.linear(x, weight, bias)
    grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias))
    if (grad or x.dtype != weight.dtype or x.numel() > MAX_ROWS * x.shape[-1] or weight.device.type != "cpu"
            or not supports(weight.dtype)):
        return F.linear(x, weight, bias)
    return torch.ops.mkldnn._linear_pointwise(x, packed(self, [weight]), None if bias is None else bias.detach(),
                                              "none", [], "")


def packed(owner: Any, weights: "list[torch.Tensor]",
           build: "Callable[[list[torch.Tensor]], torch.Tensor] | None" = None, key: tuple[Any, ...] = ()
           ) -> "torch.Tensor":
    """The packed copy of ``weights`` stacked along their output rows (one weight: a layer's own;
    several: a fused projection such as q, k and v), or of the matrix ``build`` makes of them,
    kept under ``owner`` (a module of the model, so ``forget`` drops it) and redone when any of
    them changes as ``param_state`` sees it, or ``key`` (what else ``build`` reads) changes."""
    import torch

    state = (*(param_state(w) for w in weights), key)
    entry = patch.PACKS.get(owner)
    if entry is None or entry[1] != state or any(ref() is not w for ref, w in zip(entry[0], weights)):
        detached = [w.detach() for w in weights]
        stacked = build(detached) if build is not None else detached[0] if len(weights) == 1 else torch.cat(detached)
        entry = patch.PACKS[owner] = (tuple(weakref.ref(w) for w in weights), state,
                                 torch.ops.mkldnn._reorder_linear_weight(stacked, ROWS_HINT))
    return entry[2]

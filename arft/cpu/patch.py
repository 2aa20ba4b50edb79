"""The one module that patches transformers models: arft's CPU fast paths go into a model with
``install`` and come out with ``uninstall``.

``install(policy, train=False)`` is the engine's: the model's attention implementation becomes
arft's attention function (``arft.cpu.attention``, which is ``sdpa`` for every call the engine
does not mark) where it ran ``sdpa`` and PyTorch has its CPU flash kernel.

``install(policy, train=True, ops=...)`` is the trainer's, one switch an op (``KERNEL_OPS`` are
``training.cpu_kernels``, ``LORA`` is ``training.fused_lora``); an op left out is taken out again,
so the learner calls it at every update (a Hugging Face model's ``train()`` re-applies its hub
kernels, which puts every norm's own forward back):

- ``rms_norm``, ``silu_mul``, ``lora``: every module the op reproduces (``op.fusable``) gets the
  op's dispatch as its forward, set on the instance as ``functools.partial(op.forward, module)``
  (a module-level function: the module still pickles). A module whose forward something else
  already replaced (a hub kernel) keeps that one.
- ``attention``: the attention layers are marked for the update's kernel
  (``train_attention.MARK``) and the model gets arft's attention function as above.
- ``rotary``: Llama, Qwen2/3 and Mistral look ``apply_rotary_pos_emb`` up in their modelling
  module at each call, so that replacement is process-wide: put in at the first install, what it
  replaced kept, and put back at the last uninstall. It rotates on the kernel only inside the
  attention layers of the policies it was installed on: their forward, set on the instance as
  above, turns ``_IN_ROTARY_LAYER`` on for the call (``in_rotary_layer``).

Each op reaches only the calls its dispatch takes (where autograd records or in the trainer's own
passes, on the CPU where the kernels run); ``installed(policy)`` counts what a policy has.

It keeps at module level what ``uninstall`` needs to restore exactly what was there: what it
replaced process-wide, which policies hold the rotation, each model's attention implementation
before arft's. It is also the one home of the rest of ``arft.cpu``'s process-wide state, read by
the patched code at each call: the per-thread switches that tell it which path to take
(``TRAINER_PASSES``, ``PACKED_PASSES``) and the packed weights of ``packed_linear``'s layers
(``PACKS``). The ops and the other modules keep none.
"""

from __future__ import annotations

import functools
import sys
import weakref
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, NamedTuple

from arft.cpu import attention
from arft.cpu import cascade
from arft.cpu import kernels as cpu_kernels
from arft.cpu import train_attention
from arft.cpu.trainer_pass import ThreadFlag

if TYPE_CHECKING:
    import torch

KERNEL_OPS = frozenset({"rms_norm", "silu_mul", "rotary", "attention"})
"""The trainer's ops on arft's CPU kernels (``training.cpu_kernels``)."""
LORA = "lora"
"""The fused LoRA linear layer (``training.fused_lora``)."""
ALL_OPS = KERNEL_OPS | {LORA}

_ROTARY_REPLACED: dict[str, Callable[..., Any]] = {}
"""Each modelling module's own ``apply_rotary_pos_emb``, while the fused rotation replaces it."""
_ROTARY_POLICIES: "weakref.WeakSet[Any]" = weakref.WeakSet()
"""The policies the fused rotation is installed on (a policy dropped without ``uninstall`` leaves, and
the last one to leave puts transformers' own rotation back: ``_restore_if_unheld``)."""
_IN_ROTARY_LAYER = ThreadFlag()
"""On, for its thread, during the forward of an attention layer the rotation was installed on."""
_ATTENTION_BEFORE: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()
"""Each model's attention implementation before arft's attention function replaced it."""

TRAINER_PASSES = ThreadFlag()
"""On inside the trainer's own passes (the learner's old-logprob pass): the fused functions the
update uses (``arft.cpu.ops``, ``train_attention``) run there without a gradient too, so that its
old-logprob pass computes exactly what its update pass computes."""
PACKED_PASSES = ThreadFlag()
"""On inside the engine's small passes (``packed_linear.packed_passes``): enabled linear layers take
oneDNN's packed path."""
PACKS: "weakref.WeakKeyDictionary[Any, tuple[tuple[Any, ...], tuple[Any, ...], torch.Tensor]]" = (
    weakref.WeakKeyDictionary())
"""Each packed layer's packed weight (or a fused group's, under its owner module), with weak
references to the parameters it was packed from and their ``param_state`` then
(``packed_linear.packed``). Kept outside the modules so that copying or pickling a model never
meets oneDNN's opaque tensors."""


class Installed(NamedTuple):
    """What a policy has of arft's patches (``installed``)."""

    attention: bool
    """The model runs arft's attention function (``attention.NAME``)."""
    attention_layers: int
    """Attention layers marked for the update's kernel."""
    norms: int
    mlps: int
    lora: int
    rotary: int
    """Attention layers whose rotation runs on the kernel."""


def install(policy: Any, *, train: bool, ops: Collection[str] = ALL_OPS) -> Installed:
    """Put the engine's (``train=False``) or the trainer's patches into ``policy`` (module doc): the
    trainer's ``ops`` where the kernels run them here, every other op of the trainer's taken out.
    Idempotent; returns what the policy has now."""
    if not train:
        _use_attention(policy, cascade.has_cpu_flash())
        return installed(policy)
    from arft.cpu.ops import lora, rms_norm, silu_mul
    from arft.cpu.ops import rotary

    kernels = cpu_kernels.load() if KERNEL_OPS & set(ops) else None
    _set_forwards(policy, rms_norm.fusable, rms_norm.forward, "rms_norm" in ops and rms_norm.runs(kernels))
    _set_forwards(policy, silu_mul.fusable, silu_mul.forward, "silu_mul" in ops and silu_mul.runs(kernels))
    _set_forwards(policy, lora.fusable, lora.forward, LORA in ops)
    _set_rotary(policy, "rotary" in ops and rotary.runs(kernels))
    _mark_attention(policy, "attention" in ops and train_attention.runs(kernels))
    return installed(policy)


def uninstall(policy: Any) -> None:
    """Take every patch ``install`` put into ``policy`` out again, the engine's attention
    function included; the rotation's process-wide replacement goes with the last policy holding it."""
    install(policy, train=True, ops=())
    model = _attention_owner(policy)
    before = _ATTENTION_BEFORE.pop(model, None) if model is not None else None
    if before is not None and _implementation(model) == attention.NAME:
        model.set_attn_implementation(before)


def installed(policy: Any) -> Installed:
    """What ``policy`` has of arft's patches now."""
    from arft.cpu.ops import lora, rms_norm, silu_mul

    modules = list(policy.modules())
    model = _attention_owner(policy)
    return Installed(
        attention=model is not None and _implementation(model) == attention.NAME,
        attention_layers=sum(bool(getattr(m, train_attention.MARK, False)) for m in modules if _attention_layer(m)),
        norms=sum(_has_forward(m, rms_norm.forward) for m in modules),
        mlps=sum(_has_forward(m, silu_mul.forward) for m in modules),
        lora=sum(_has_forward(m, lora.forward) for m in modules),
        rotary=sum(_has_forward(m, _rotary_layer_forward) for m in modules))


def in_rotary_layer() -> bool:
    """Whether this thread is in the forward of an attention layer the rotation was installed on."""
    return bool(_IN_ROTARY_LAYER)


def _set_forwards(policy: Any, select: Callable[[Any], bool], forward: Callable[..., Any], on: bool) -> None:
    """Give every module of ``policy`` that ``select`` takes ``forward`` (called with the module
    first) where ``on``, or take it away."""
    for module in policy.modules():
        if on and select(module) and "forward" not in module.__dict__:
            module.forward = functools.partial(forward, module)  # a partial, not a bound method: it pickles
        elif not on and _has_forward(module, forward):
            del module.__dict__["forward"]


def _has_forward(module: "torch.nn.Module", forward: Callable[..., Any]) -> bool:
    """Whether ``module`` runs ``forward`` (``_set_forwards``)."""
    current = module.__dict__.get("forward")
    return isinstance(current, functools.partial) and current.func is forward


def _attention_layer(module: "torch.nn.Module") -> bool:
    """Whether ``module`` is one of Hugging Face's attention layers."""
    return hasattr(module, "is_causal") and hasattr(module, "scaling")


def _set_rotary(policy: Any, on: bool) -> None:
    """The fused rotation in ``policy``'s attention layers (``on``) or out of them; the
    process-wide replacement put in with the first policy and back with the last."""
    if on and _replace_rotary():
        if policy not in _ROTARY_POLICIES:
            _ROTARY_POLICIES.add(policy)
            weakref.finalize(policy, _restore_if_unheld).atexit = False
        _set_forwards(policy, _attention_layer, _rotary_layer_forward, True)
        return
    _ROTARY_POLICIES.discard(policy)
    _set_forwards(policy, _attention_layer, _rotary_layer_forward, False)
    _restore_if_unheld()


def _restore_if_unheld() -> None:
    """A policy let go of the rotation (``uninstall``, or collected without it): once no live
    policy holds it, transformers' own rotation goes back. Iterating the set yields live policies only."""
    if not any(True for _ in _ROTARY_POLICIES):
        _restore_rotary()


def _rotary_layer_forward(module: "torch.nn.Module", *args: Any, **kwargs: Any) -> Any:
    """An attention layer's own forward, with the fused rotation on for the call."""
    with _IN_ROTARY_LAYER.on():
        return type(module).forward(module, *args, **kwargs)


def _replace_rotary() -> int:
    """Put the fused rotation in the modelling modules loaded (``rotary.MODULES``), keeping what
    it replaces; returns how many have it."""
    from arft.cpu.ops import rotary

    n = 0
    for name in rotary.MODULES:
        module: Any = sys.modules.get(name)  # a modelling module: its functions are its attributes
        current = getattr(module, "apply_rotary_pos_emb", None)
        if current is None:
            continue
        if not _is_fused_rotary(current):
            _ROTARY_REPLACED[name] = current
            module.apply_rotary_pos_emb = functools.partial(
                rotary.apply_rotary_pos_emb, original=current, on=in_rotary_layer)
        n += 1
    return n


def _restore_rotary() -> None:
    """Put back every modelling module's own ``apply_rotary_pos_emb``."""
    for name, original in list(_ROTARY_REPLACED.items()):
        module: Any = sys.modules.get(name)
        if module is not None and _is_fused_rotary(getattr(module, "apply_rotary_pos_emb", None)):
            module.apply_rotary_pos_emb = original
        del _ROTARY_REPLACED[name]


def _is_fused_rotary(function: Any) -> bool:
    from arft.cpu.ops import rotary

    return isinstance(function, functools.partial) and function.func is rotary.apply_rotary_pos_emb


def _mark_attention(policy: Any, on: bool) -> None:
    """Mark ``policy``'s attention layers for the update's kernel (``on``, and give the model
    arft's attention function), or unmark them (the function stays: it is ``sdpa`` for them)."""
    if on:
        _use_attention(policy, True)
    for module in policy.modules():
        if _attention_layer(module):
            if on:
                setattr(module, train_attention.MARK, True)
            else:
                module.__dict__.pop(train_attention.MARK, None)


def _use_attention(policy: Any, allowed: bool) -> None:
    """Give the model arft's attention function where it runs ``sdpa`` now and ``allowed``;
    eager, flash, flex or a custom kernel are left as they are."""
    model = _attention_owner(policy)
    if model is None or not allowed or _implementation(model) != "sdpa":
        return
    attention.register()
    _ATTENTION_BEFORE.setdefault(model, "sdpa")
    model.set_attn_implementation(attention.NAME)


def _attention_owner(policy: Any) -> Any:
    """The module of ``policy`` whose config names its attention implementation (``None``: none)."""
    return next((m for m in policy.modules() if hasattr(m, "set_attn_implementation") and hasattr(m, "config")),
                None)


def _implementation(model: Any) -> str | None:
    return getattr(getattr(model, "config", None), "_attn_implementation", None)

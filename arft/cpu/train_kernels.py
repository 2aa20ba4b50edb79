"""The update's kernels (``CpuKernels.train``; ``arft.cpu.kernels`` builds and loads their
libraries): causal attention's forward and backward passes on AMX (``csrc/train_attention.cpp``,
used by ``arft.cpu.train_attention``), and the sampled tokens' logprobs and entropy, the rotary
embedding out of place and the gradient of the MLP's ``silu(gate) * up`` (``csrc/train_ops.cpp``,
AVX-512; used by ``arft.cpu.ops``). Each is one pass where PyTorch runs several over large
tensors; each call is checked against the header (``arft.cpu.abi``). torch is imported lazily.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Mapping

from arft.cpu import abi

if TYPE_CHECKING:
    import torch


class TrainKernels:
    """``attention_forward`` and ``attention_backward`` where ``attention_backward_runs``;
    ``token_logprobs``, its backward, ``rope`` and ``silu_mul_backward`` where ``ops``."""

    def __init__(self, libs: Mapping[str, ctypes.CDLL]) -> None:
        attention, ops = bound(libs, "train_attention"), bound(libs, "train_ops")
        self._attn, self._attn_back = attention.get("arft_attention_forward"), attention.get("arft_attention_backward")
        self.attention_backward_runs = bool(attention) and bool(attention["arft_attention_backward_caps"]())
        """Whether ``attention_forward`` and ``attention_backward`` run here (AMX with bfloat16,
        and Linux lent its tiles)."""
        self.max_scores = int(attention["arft_attention_max_scores"]()) if attention else 0
        """Queries × keys a head at most for the attention kernels (the library's
        ``ARFT_ATTENTION_MAX_SCORES``): the backward keeps a head's dSᵀ, 2 bytes a score, per
        thread; longer sequences run ``sdpa``."""
        self._lp, self._lp_back = ops.get("arft_token_logprobs"), ops.get("arft_token_logprobs_backward")
        self._silu_back, self._rope = ops.get("arft_silu_mul_backward"), ops.get("arft_rope_strided")
        self.ops = bool(ops) and bool(ops["arft_train_ops_caps"]())
        """Whether the logprob, silu and rotary kernels run here (AVX-512)."""

    def attention_forward(self, q: "torch.Tensor", k: "torch.Tensor", v: "torch.Tensor", lens: "torch.Tensor | None",
                          scale: float) -> tuple["torch.Tensor", "torch.Tensor"]:
        """Causal softmax attention as ``attention_backward`` takes it (the queries the last ``Tq``
        of ``Tk`` positions, row ``b`` seeing its first ``lens[b]`` keys): the output ``[B, Hq,
        Tq, D]`` (a view of a ``[B, Tq, Hq, D]`` tensor, the layout the layers want next) and
        the log-sum-exp ``[B, Hq, Tq]`` (float32)."""
        import torch

        b, hq, tq, d = q.shape
        self._check(q, k, v, lens)
        out = torch.empty((b, tq, hq, d), dtype=q.dtype).transpose(1, 2)
        lse = torch.empty((b, hq, tq), dtype=torch.float32)
        if need("train_attention", self._attn)(q, _strides(q), k, _strides(k), v, _strides(v), lens, out, _strides(out),
                                              lse, b, hq, k.shape[1], tq, k.shape[2], d, scale,
                                              torch.get_num_threads()):
            raise ValueError(f"arft CPU kernels: no attention of {hq} query heads on {k.shape[1]} key/value heads, "
                             f"{tq} queries on {k.shape[2]} keys, heads of {d}, here; check "
                             "CpuKernels.train.attention_backward_runs first")
        return out, lse

    def _check(self, q: "torch.Tensor", k: "torch.Tensor", v: "torch.Tensor", lens: "torch.Tensor | None") -> None:
        import torch

        tensors = (q, k, v)
        if (any(x.dtype != torch.bfloat16 or x.stride(-1) != 1 or x.device.type != "cpu" or x.dim() != 4
                or any(s % 2 for s in x.stride()[:-1]) for x in tensors)
                or k.shape != v.shape or q.shape[0] != k.shape[0] or q.shape[-1] != k.shape[-1] or k.shape[1] < 1
                or q.shape[1] % k.shape[1]
                or (lens is not None and (lens.shape != q.shape[:1] or lens.dtype != torch.int64
                                          or not lens.is_contiguous()))):
            raise ValueError("arft CPU kernels: attention needs bfloat16 q [B, Hq, Tq, D] and k, v [B, Hk, Tk, D] "
                             "(Hq a multiple of Hk) with a contiguous last dimension and even strides, and int64 "
                             f"lens [B] (got {[(x.dtype, tuple(x.shape), x.stride()) for x in tensors]})")

    def attention_backward(self, q: "torch.Tensor", k: "torch.Tensor", v: "torch.Tensor", out: "torch.Tensor",
                           grad: "torch.Tensor", lse: "torch.Tensor", lens: "torch.Tensor | None",
                           scale: float) -> tuple["torch.Tensor", "torch.Tensor", "torch.Tensor"]:
        """The gradients of causal softmax attention with respect to ``q`` ``[B, Hq, Tq, D]`` and
        ``k``/``v`` ``[B, Hk, Tk, D]`` (``Hq`` a multiple of ``Hk``), given its ``out`` and
        log-sum-exp ``lse`` ``[B, Hq, Tq]`` (float32; ``attention_forward`` and PyTorch's flash
        forward return both) and
        ``grad`` (of ``out``): the queries are the last ``Tq`` of ``Tk`` positions, and row ``b``
        sees only its first ``lens[b]`` keys (int64 ``[B]``; ``None``: all). bfloat16, the last
        dimension contiguous and even strides, ``D`` a multiple of 32; where ``attention_backward_runs``
        (``csrc/train_attention.cpp``)."""
        import torch

        b, hq, tq, d = q.shape
        self._check(q, k, v, lens)
        self._check(out, grad, grad, None)
        if out.shape != q.shape or grad.shape != q.shape or lse.shape != (b, hq, tq) or lse.dtype != torch.float32:
            raise ValueError("arft CPU kernels: attention_backward needs out and grad shaped like q and a float32 lse "
                             f"[B, Hq, Tq] (got {tuple(out.shape)}, {tuple(grad.shape)}, {lse.dtype} "
                             f"{tuple(lse.shape)})")
        gq, gk, gv = (torch.empty(x.shape, dtype=x.dtype) for x in (q, k, v))
        args: list[object] = [x for t in (q, k, v, out, grad) for x in (t, _strides(t))]
        args += [lse, (ctypes.c_int64 * 3)(*lse.stride()), lens]
        args += [x for t in (gq, gk, gv) for x in (t, _strides(t))]
        if need("train_attention", self._attn_back)(*args, b, hq, k.shape[1], tq, k.shape[2], d, scale,
                                                   torch.get_num_threads()):
            raise ValueError(f"arft CPU kernels: no attention backward of {hq} query heads on {k.shape[1]} key/value "
                             f"heads, {tq} queries on {k.shape[2]} keys, heads of {d}, here; check "
                             "CpuKernels.train.attention_backward_runs first")
        return gq, gk, gv

    def token_logprobs(self, logits: "torch.Tensor", targets: "torch.Tensor", inv_t: float = 1.0
                       ) -> tuple["torch.Tensor", "torch.Tensor", "torch.Tensor"]:
        """Of ``y = logits * inv_t`` (``[N, V]``, rows contiguous, bfloat16 or float32): each row's
        logprob of ``targets`` (int64 ``[N]``), entropy and log-sum-exp, float32 ``[N]`` each,
        in float32 from the logits' values (as ``log_softmax(dtype=float32)``)."""
        import torch

        n, v = self._rows(logits, targets)
        lp, ent, lse = (torch.empty(n, dtype=torch.float32) for _ in range(3))
        rc = need("train_ops", self._lp)(logits, logits.stride(0), targets, lp, ent, lse, n, v, inv_t,
                                        int(logits.dtype == torch.bfloat16), torch.get_num_threads())
        if rc:
            raise ValueError("arft CPU kernels: " + ("a target outside the vocabulary" if rc == 2 else
                                                     "no token logprobs here; check CpuKernels.train.ops first"))
        return lp, ent, lse

    def token_logprobs_backward(self, logits: "torch.Tensor", targets: "torch.Tensor", lse: "torch.Tensor",
                                grad: "torch.Tensor", inv_t: float = 1.0) -> "torch.Tensor":
        """The gradient with respect to ``logits`` of ``sum(grad * logprobs)`` (``token_logprobs``'s
        logprobs, ``lse`` its log-sum-exp): ``grad * inv_t * (onehot - softmax)``, logits' dtype."""
        import torch

        n, v = self._rows(logits, targets)
        grad = grad.float().contiguous()
        out = torch.empty((n, v), dtype=logits.dtype)
        if need("train_ops", self._lp_back)(logits, logits.stride(0), targets, lse, grad, out, n, v, inv_t,
                                           int(logits.dtype == torch.bfloat16), torch.get_num_threads()):
            raise ValueError("arft CPU kernels: no token logprobs here; check CpuKernels.train.ops first")
        return out

    def _rows(self, logits: "torch.Tensor", targets: "torch.Tensor") -> tuple[int, int]:
        import torch

        if (logits.dim() != 2 or logits.stride(-1) != 1 or logits.dtype not in (torch.bfloat16, torch.float32)
                or logits.device.type != "cpu" or targets.shape != logits.shape[:1] or targets.dtype != torch.int64
                or not targets.is_contiguous()):
            raise ValueError("arft CPU kernels: token logprobs need logits [N, V] (bfloat16 or float32, rows "
                             f"contiguous) and int64 targets [N] (got {logits.dtype} {tuple(logits.shape)}, "
                             f"{targets.dtype} {tuple(targets.shape)})")
        return logits.shape[0], logits.shape[1]

    def rope(self, x: "torch.Tensor", cos: "torch.Tensor", sin: "torch.Tensor", inverse: bool = False
             ) -> "torch.Tensor":
        """``x`` ``[B, H, T, D]`` (strided, the last dimension contiguous) rotated by ``cos``/``sin``
        ``[B or 1, T, D]`` as Hugging Face's ``apply_rotary_pos_emb`` (or by ``-sin`` where
        ``inverse``: the rotation's gradient), into a new contiguous tensor; one dtype
        (bfloat16 or float32) for all three, ``cos`` and ``sin`` in one layout."""
        import torch

        b, h, t, d = x.shape
        if (x.dtype not in (torch.bfloat16, torch.float32) or cos.dtype != x.dtype or sin.dtype != x.dtype
                or cos.shape != sin.shape or cos.stride() != sin.stride() or cos.dim() != 3
                or cos.shape[0] not in (1, b) or tuple(cos.shape[1:]) != (t, d) or x.stride(-1) != 1
                or cos.stride(-1) != 1 or d % 2):
            raise ValueError("arft CPU kernels: rope needs x [B, H, T, D] and cos/sin [B or 1, T, D] of one dtype "
                             f"(got {x.dtype} {tuple(x.shape)}, {cos.dtype} {tuple(cos.shape)})")
        out = torch.empty(x.shape, dtype=x.dtype)
        sc = (ctypes.c_int64 * 2)(cos.stride(0) if cos.shape[0] > 1 else 0, cos.stride(1))
        if need("train_ops", self._rope)(x, _strides(x), out, _strides(out), cos, sin, sc, b, h, t, d, int(inverse),
                                        int(x.dtype == torch.bfloat16), torch.get_num_threads()):
            raise ValueError("arft CPU kernels: no rotary embedding here; check CpuKernels.train.ops first")
        return out

    def silu_mul_backward(self, gate: "torch.Tensor", up: "torch.Tensor", grad: "torch.Tensor"
                          ) -> tuple["torch.Tensor", "torch.Tensor"]:
        """The gradients with respect to ``gate`` and ``up`` of ``silu(gate) * up`` (silu rounded to
        the dtype first, as ``CpuKernels.silu_mul``), given ``grad``: contiguous, one shape and
        dtype (bfloat16 or float32), each computed in float32 and rounded once."""
        import torch

        tensors = (gate, up, grad)
        if any(x.shape != gate.shape or x.dtype != gate.dtype or not x.is_contiguous() or x.device.type != "cpu"
               for x in tensors) or gate.dtype not in (torch.bfloat16, torch.float32):
            raise ValueError("arft CPU kernels: silu_mul_backward needs gate, up and grad contiguous, of one shape "
                             "and dtype (bfloat16 or float32)")
        dgate, dup = torch.empty_like(gate), torch.empty_like(up)
        if need("train_ops", self._silu_back)(gate, up, grad, dgate, dup, gate.numel(),
                                             int(gate.dtype == torch.bfloat16), torch.get_num_threads()):
            raise ValueError("arft CPU kernels: no silu_mul backward here; check CpuKernels.train.ops first")
        return dgate, dup


def _strides(x: "torch.Tensor") -> "ctypes.Array[ctypes.c_int64]":
    """``x``'s strides but the last, for a kernel."""
    return (ctypes.c_int64 * (x.dim() - 1))(*x.stride()[:-1])


def bound(libs: Mapping[str, ctypes.CDLL], name: str) -> dict[str, abi.Function]:
    """Library ``name``'s functions (``arft.cpu.abi``) where it is among ``libs``, else none."""
    return abi.bind(libs[name], name) if name in libs else {}


def need(library: str, fn: "abi.Function | None") -> "abi.Function":
    """``fn``, or a clear error where its library is off."""
    if fn is None:
        raise ValueError(f"arft CPU kernels: {library} is off here; check arft.cpu.kernels.status()")
    return fn

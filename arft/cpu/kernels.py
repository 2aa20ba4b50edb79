"""arft's CPU kernels as the engine and the trainer call them: ``load()`` builds (``arft.cpu.build``)
and opens one library per source in ``csrc/``, and ``CpuKernels`` gives their ops as methods on
tensors, each call checked against the header's prototypes (``arft.cpu.abi``).

- decode attention (``decode_attention.cpp``, AVX-512 in float32 and, on AVX512-BF16, bfloat16;
  ``decode_attention_avx2.cpp``, float32 on CPUs with AVX2 and FMA but no AVX-512): a decode
  step's rows, one query token each, against their own keys and values, joined with the shared
  prefix's part (``CpuKernels.attend``, used by ``arft.cpu.cascade``);
- the small steps around a decode step's products (``small_ops.cpp``, AVX-512): RMSNorm after
  its residual add, the rotary embedding in place, ``silu(gate) * up``, with Hugging Face's results;
- the update's kernels (``CpuKernels.train``, ``arft.cpu.train_kernels``): causal attention's two
  passes on AMX and the token-logprob, rotary and SiLU-mul gradients.

Each library loads or is off on its own (``status()`` says which and why: no compiler, a failed
build, a CPU without the instructions); where one is off its ops say so (``supports``,
``small_ops``, ``train.attention_backward_runs``, ``train.ops``) and their callers run PyTorch's
operations instead. Their OpenMP loops run on the OpenMP runtime torch already loaded (the same
``libgomp.so.1``): no threads added. docs/cpu.md has the whole story. torch is imported lazily.
"""

from __future__ import annotations

import ctypes
import functools
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, NamedTuple, Sequence

from arft.cpu import abi, build
from arft.cpu.train_kernels import TrainKernels, bound as _bound, need

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

GROUPS = range(1, 9)
"""Query heads per key/value head the decode-attention kernels are built for."""
HEAD_DIMS = (32, 64, 128)
FLOAT32, BFLOAT16 = 1, 2
"""Bits of ``CpuKernels.caps``: the dtypes decode attention runs in here."""
OPS = {"decode_attention": "decode attention, AVX-512", "decode_attention_avx2": "decode attention, AVX2",
       "small_ops": "RMSNorm, rotary, SiLU-mul", "train_attention": "train attention, AMX",
       "train_ops": "token logprobs, rotary and SiLU-mul backward"}
"""What each library runs, as ``status()`` names it."""


class CpuKernels:
    """The loaded kernels: ``attend`` where ``supports``; ``rms_norm``, ``rope_``, ``silu_mul``
    where ``small_ops``; the update's on ``train``. ``libs``: each source's library by name
    (``build.LIBRARIES``); a library left out is off."""

    def __init__(self, libs: Mapping[str, ctypes.CDLL]) -> None:
        decode, avx2, small = (_bound(libs, n) for n in ("decode_attention", "decode_attention_avx2", "small_ops"))
        self._run, self._avx2 = decode.get("arft_decode_attention"), avx2.get("arft_decode_attention_avx2")
        self._own_caps = int(decode["arft_decode_attention_caps"]()) if decode else 0
        self._avx2_runs = bool(avx2) and bool(avx2["arft_decode_attention_avx2_caps"]())
        self.caps = self._own_caps | (FLOAT32 if self._avx2_runs else 0)
        """Bits ``FLOAT32``/``BFLOAT16``: the dtypes ``attend`` runs here (float32 on the AVX2
        library where the AVX-512 one does not run it)."""
        self._norm, self._norm_back = small.get("arft_rms_norm"), small.get("arft_rms_norm_backward")
        self._rope, self._silu = small.get("arft_rope"), small.get("arft_silu_mul")
        self.small_ops = bool(small) and bool(small["arft_small_ops_caps"]())
        """Whether ``rms_norm``, ``rope_`` and ``silu_mul`` run here (AVX-512)."""
        self.max_norm_dim = int(small["arft_rms_norm_max_dim"]()) if small else 0
        """Values a row at most for ``rms_norm`` (the library's ``ARFT_RMS_NORM_MAX_DIM``)."""
        self.train = TrainKernels(libs)
        """The update's kernels (``arft.cpu.train_kernels``)."""
        self.loaded = frozenset(libs)
        """The libraries this was opened with."""

    def supports(self, dtype: "torch.dtype", group: int, head_dim: int) -> bool:
        """Whether it runs queries of ``dtype`` with ``group`` query heads per key/value head."""
        import torch

        bit = {torch.float32: FLOAT32, torch.bfloat16: BFLOAT16}.get(dtype, 0)
        return bool(self.caps & bit) and group in GROUPS and head_dim in HEAD_DIMS

    def attend(self, q: "torch.Tensor", key: "torch.Tensor", value: "torch.Tensor", mask: "torch.Tensor | None",
               scale: float, prior: "tuple[torch.Tensor, torch.Tensor] | None" = None) -> "torch.Tensor":
        """Softmax attention of ``q`` ``[B, H, G, D]`` (one token a row, ``G`` query heads per
        key/value head) over ``key``/``value`` ``[B, H, T, D]`` under ``mask`` ``[B, T]``
        (additive, ``q``'s dtype; ``None``: every column), joined with ``prior``: the output
        ``[B, H, G, D]`` and log-sum-exp ``[B, H, G]`` (float32) of the same queries over other
        columns (PyTorch's flash kernel returns both). Returns ``[B, H, G, D]`` in ``q``'s dtype,
        contiguous. Inputs must be on the CPU, in one dtype ``supports``, last dimension contiguous."""
        import torch

        b, h, g, d = q.shape
        t = key.shape[2]
        tensors = [q, key, value] + ([] if mask is None else [mask]) + ([] if prior is None else [prior[0]])
        if any(x.stride(-1) != 1 or x.dtype != q.dtype or x.device.type != "cpu" for x in tensors):
            raise ValueError("arft CPU kernels: q, keys, values, mask and prior need one dtype, the CPU and a "
                             f"contiguous last dimension (got {[(x.dtype, x.stride()) for x in tensors]})")
        shapes = [(key.shape, (b, h, t, d)), (value.shape, (b, h, t, d))] + (
            [] if mask is None else [(mask.shape, (b, t))]) + (
            [] if prior is None else [(prior[0].shape, (b, h, g, d)), (prior[1].shape, (b, h, g))])
        if any(tuple(got) != want for got, want in shapes) or (prior is not None and prior[1].dtype != torch.float32):
            raise ValueError(f"arft CPU kernels: attend got shapes {[tuple(x) for x, _ in shapes]}, wants "
                             f"{[w for _, w in shapes]} (the prior's log-sum-exp in float32)")
        if not self.supports(q.dtype, g, d):
            raise ValueError(f"arft CPU kernels: {q.dtype} with {g} query heads of {d} per key/value head is not "
                             "built here; check CpuKernels.supports first")
        out = torch.empty((b, h, g, d), dtype=q.dtype)
        m = (None, 0) if mask is None else (mask, mask.stride(0))
        p = (None, 0, 0, 0, None, 0, 0, 0) if prior is None else (
            prior[0], *prior[0].stride()[:3], prior[1], *prior[1].stride())
        args = (q, *q.stride()[:3], key, *key.stride()[:3], value, *value.stride()[:3], *m, *p, out, None, b, h, g, t,
                d, scale)
        own = q.dtype == torch.bfloat16 or self._own_caps & FLOAT32  # else float32 on the AVX2 library
        rc = (need("decode_attention", self._run)(*args, int(q.dtype == torch.bfloat16), torch.get_num_threads())
              if own else need("decode_attention_avx2", self._avx2)(*args, torch.get_num_threads()))
        if rc:
            raise ValueError(f"arft CPU kernels: {q.dtype} with {g} query heads of {d} per key/value head is not "
                             "built here; check CpuKernels.supports first")
        return out

    def rms_norm(self, x: "torch.Tensor", weight: "torch.Tensor", eps: float, delta: "torch.Tensor | None" = None,
                 rstd: "torch.Tensor | None" = None) -> tuple["torch.Tensor", "torch.Tensor"]:
        """Llama's RMSNorm of ``x + delta`` (``delta``: the residual add it follows; ``x`` alone
        without it) with ``weight``, as Hugging Face's ``LlamaRMSNorm`` computes it: the normed
        rows and ``x + delta`` (``x`` itself without ``delta``); ``rstd`` (float32, one a row)
        gets each row's ``rsqrt(mean(x²) + eps)``. Rows of ``x`` ``[..., dim]`` contiguous, where
        ``small_ops`` and ``fits``."""
        import torch

        dim = x.shape[-1]
        rows = x.numel() // dim
        if (weight.dtype != x.dtype or weight.numel() != dim or not weight.is_contiguous()
                or (delta is not None and (delta.shape != x.shape or delta.dtype != x.dtype))):
            raise ValueError("arft CPU kernels: rms_norm needs a weight of x's dtype and width (and a delta like x); "
                             "check CpuKernels.fits first")
        out = torch.empty_like(x)
        hidden = x if delta is None else torch.empty_like(x)
        rc = need("small_ops", self._norm)(x, dim, delta, dim, None if delta is None else hidden, dim, weight,
                                                out, dim, rows, dim, eps, rstd, int(x.dtype == torch.bfloat16),
                                                torch.get_num_threads())
        if rc:
            raise ValueError(f"arft CPU kernels: no RMSNorm of {dim} values a row here; check CpuKernels.fits first")
        return out, hidden

    def rms_norm_backward(self, grad: "torch.Tensor", x: "torch.Tensor", weight: "torch.Tensor",
                          rstd: "torch.Tensor") -> "torch.Tensor":
        """The gradient with respect to ``x`` of ``rms_norm`` without ``delta`` (``rstd`` from its
        forward): ``r (w ∂y) - x r³ mean(w ∂y x)``, computed in float32 and rounded once; ``grad``,
        ``x`` and ``weight`` of ``x``'s dtype, ``grad`` and ``x`` contiguous ``[..., dim]``."""
        import torch

        dim = x.shape[-1]
        out = torch.empty_like(x)
        if need("small_ops", self._norm_back)(grad, x, weight, rstd, out, x.numel() // dim, dim,
                                                   int(x.dtype == torch.bfloat16), torch.get_num_threads()):
            raise ValueError(f"arft CPU kernels: no RMSNorm backward of {dim} values a row here")
        return out

    def rope_(self, x: "torch.Tensor", heads: int, head_dim: int, cos: "torch.Tensor", sin: "torch.Tensor") -> None:
        """Rotate the first ``heads`` heads of each row of ``x`` ``[..., >= heads * head_dim]`` in
        place by ``cos``/``sin`` ``[..., head_dim]`` (one row each), as Hugging Face's
        ``apply_rotary_pos_emb`` does; rows evenly strided (``rows_of``), where ``small_ops``."""
        import torch

        stride, rows = rows_of(x), x.numel() // x.shape[-1]
        if (stride is None or rows_of(cos) != head_dim or rows_of(sin) != head_dim or heads * head_dim > x.shape[-1]
                or cos.numel() != rows * head_dim or sin.numel() != rows * head_dim
                or not cos.dtype == sin.dtype == x.dtype):
            raise ValueError("arft CPU kernels: rope_ needs evenly strided rows of at least heads * head_dim, and "
                             "contiguous cos/sin of x's dtype with one row per row of x")
        rc = need("small_ops", self._rope)(x, stride, heads, head_dim, cos, sin, head_dim, rows,
                                                int(x.dtype == torch.bfloat16), torch.get_num_threads())
        if rc:
            raise ValueError(f"arft CPU kernels: no rotary embedding of heads of {head_dim} here")

    def silu_mul(self, gate: "torch.Tensor", up: "torch.Tensor") -> "torch.Tensor":
        """``F.silu(gate) * up`` (contiguous, ``gate``'s shape) for ``gate``/``up`` ``[..., n]`` with
        evenly strided rows (``rows_of``; e.g. the two halves of one product's output), where
        ``small_ops``."""
        import torch

        g_row, u_row = rows_of(gate), rows_of(up)
        if g_row is None or u_row is None or gate.shape != up.shape or gate.dtype != up.dtype:
            raise ValueError("arft CPU kernels: silu_mul needs gate and up of one shape and dtype, rows evenly strided")
        out = torch.empty(gate.shape, dtype=gate.dtype)
        rc = need("small_ops", self._silu)(gate, g_row, up, u_row, out, gate.numel() // gate.shape[-1],
                                                gate.shape[-1], int(gate.dtype == torch.bfloat16),
                                                torch.get_num_threads())
        if rc:
            raise ValueError("arft CPU kernels: no silu_mul here; check CpuKernels.small_ops first")
        return out

    def fits(self, x: "torch.Tensor") -> bool:
        """Whether ``rms_norm``/``rope_`` take ``x``: on the CPU, a dtype the build runs, contiguous
        rows of a multiple of 16 values (at most ``max_norm_dim``)."""
        return (self.small_ops and self.supports(x.dtype, 1, 64) and x.device.type == "cpu" and x.is_contiguous()
                and x.shape[-1] % 16 == 0 and x.shape[-1] <= self.max_norm_dim)

    def off_reason(self, library: str) -> str | None:
        """Why ``library``'s ops do not run here though it loaded (``None``: they run)."""
        if library not in self.loaded:
            return "it was not loaded"
        avx512 = "built for this CPU without AVX-512"
        off = {"decode_attention": None if self._own_caps else avx512 + (
                   ": decode attention runs on decode_attention_avx2" if self._avx2_runs else ""),
               "decode_attention_avx2": None if self._avx2_runs else (
                   "not needed: this CPU runs the AVX-512 decode attention" if self._own_caps & FLOAT32
                   else "built for this CPU without AVX2 and FMA"),
               "small_ops": None if self.small_ops else avx512,
               "train_attention": None if self.train.attention_backward_runs else (
                   "no AMX with bfloat16 here, or Linux did not lend its tiles (PyTorch's sdpa runs)"),
               "train_ops": None if self.train.ops else avx512}
        return off[library]


class LibraryStatus(NamedTuple):
    """One library of the kernels in this process: on, or off and why."""

    name: str
    reason: str | None
    """``None``: loaded and its ops run here; else why they do not."""
    path: Path | None = None
    broken: bool = False
    """Whether it failed to build or open (rather than this CPU lacking what it needs)."""

    def line(self) -> str:
        """``decode_attention (decode attention, AVX-512) loaded``, or ``... off because ...``."""
        state = "loaded" if self.reason is None else f"off because {self.reason}"
        return f"{self.name} ({OPS.get(self.name, self.name)}) {state}"


class Loaded(NamedTuple):
    """What ``load`` found: the kernels (``None`` where none runs here) and each library's status."""

    kernels: CpuKernels | None
    libraries: tuple[LibraryStatus, ...]


def rows_of(x: "torch.Tensor") -> int | None:
    """The stride between the rows of ``x`` ``[..., n]`` flattened to ``[rows, n]`` (its last
    dimension contiguous, every leading dimension one step of rows), ``None`` where they are not."""
    if x.stride(-1) != 1:
        return None
    row, rows = None, 1
    for size, step in zip(reversed(x.shape[:-1]), reversed(x.stride()[:-1])):
        if size == 1:
            continue
        if row is None:
            row = step
        elif step != row * rows:
            return None
        rows *= size
    return x.shape[-1] if row is None else row


def load() -> CpuKernels | None:
    """The kernels, built and loaded once a process; ``None`` where none runs here (``unavailable``)."""
    return _loaded().kernels


def status() -> tuple[LibraryStatus, ...]:
    """Each library's status in this process (loading them first, as ``load`` does)."""
    return _loaded().libraries


def unavailable() -> str | None:
    """Why ``load()`` gives ``None`` (``None`` when it gives the kernels)."""
    loaded = _loaded()
    if loaded.kernels is not None:
        return None
    reasons = list(dict.fromkeys(s.reason for s in loaded.libraries if s.reason))
    return reasons[0] if len(reasons) == 1 else "; ".join(f"{s.name}: {s.reason}" for s in loaded.libraries)


@functools.cache
def _loaded() -> Loaded:
    """Every library built (``build.build_all``) and opened: once a process."""
    loaded = open_built(build.build_all())
    for s in loaded.libraries:  # a CPU without the instructions is no news; a failed build is
        if s.broken:
            log.warning("arft's CPU kernels: %s; PyTorch's operations run instead", s.line())
        else:
            log.info("arft's CPU kernels: %s", s.line())
    return loaded


def open_built(built: Sequence[build.Built]) -> Loaded:
    """The kernels in the libraries ``built``: each one opened, checked against the header, and
    refused where it brought a second OpenMP runtime beside torch's."""
    import torch  # noqa: F401  (its OpenMP runtime loads first; the kernels' libgomp.so.1 is that one)

    libs: dict[str, ctypes.CDLL] = {}
    errors: dict[str, str] = {}
    for b in built:
        lib, error = _open(b.name, b.path) if b.path is not None else (None, b.error or "it was not built")
        if lib is not None:
            libs[b.name] = lib
        else:
            errors[b.name] = error or ""
    kernels = CpuKernels(libs) if libs else None
    states = tuple(_state(b, errors.get(b.name), kernels) for b in built)
    return Loaded(kernels if any(s.reason is None for s in states) else None, states)


def _state(built: build.Built, error: str | None, kernels: CpuKernels | None) -> LibraryStatus:
    """One library's status: its error (a failure unless it is the CPU's ``build.cpu_reason``),
    or whether its ops run on this CPU."""
    if error is not None or kernels is None:
        return LibraryStatus(built.name, error or "", built.path, broken=error != build.cpu_reason())
    return LibraryStatus(built.name, kernels.off_reason(built.name), built.path)


def opened(paths: Mapping[str, Path]) -> tuple[CpuKernels, list[str]]:
    """The kernels in the libraries at ``paths`` (by library name), and the OpenMP runtimes
    opening them added to this process (none where they share the one torch loaded)."""
    before = set(_openmp_runtimes())
    kernels = CpuKernels({name: ctypes.CDLL(str(path)) for name, path in paths.items()})
    return kernels, sorted(set(_openmp_runtimes()) - before)


def from_library(path: Path) -> CpuKernels:
    """The kernels in one library built from every source (``build.compile_to``'s default: other
    targets than this CPU, for tests and benchmarks)."""
    lib = ctypes.CDLL(str(path))
    return CpuKernels({name: lib for name in build.LIBRARIES})


def _open(name: str, path: Path) -> tuple[ctypes.CDLL | None, str | None]:
    """One library opened and its functions looked up, or why not."""
    before = set(_openmp_runtimes())
    try:
        lib = ctypes.CDLL(str(path))
        abi.bind(lib, name)
    except (OSError, AttributeError) as exc:
        return None, f"{path.name} does not open as the header says: {exc}"
    added = sorted(set(_openmp_runtimes()) - before)
    if added:  # torch with its own renamed libgomp (older wheels): two thread pools
        return None, (f"it brought a second OpenMP runtime beside torch's ({', '.join(added)}); install torch>=2.7, "
                      "whose libgomp.so.1 it shares")
    return lib, None


def _openmp_runtimes() -> list[str]:
    """The OpenMP runtime libraries this process has mapped (Linux; empty elsewhere)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return []
    names = {line.split()[-1] for line in maps.splitlines() if "/" in line}
    return sorted(n for n in names if Path(n).name.startswith(("libgomp", "libiomp", "libomp")))

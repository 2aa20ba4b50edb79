"""arft's CPU kernels (``kernels/*.cpp``), built on first use: a decode step's attention, and the
small steps around its products.

A decode step's attention on the CPU is its rows' queries (one token each, ``G`` query heads per
key/value head) against each row's own keys and values. PyTorch's CPU flash-attention kernel runs
that as matrix products of ``G`` rows, and reads the keys and values at about half the bandwidth
a plain streaming loop reaches: on a 2-core AMX Xeon it was ~45 % of the embedded model's decode
step. ``decode_attention.cpp`` streams each row's keys and values once (16 columns a block,
online softmax in float32, blocks of masked columns skipped), starts from the shared prefix's
part (read once for all rows by PyTorch's kernel, ``arft.cpu.cascade``) and writes the
merged output (``CpuKernels.attend``).

``small_ops.cpp`` holds the small steps around a step's products: Llama's RMSNorm after the
residual add it follows, the rotary embedding of queries and keys in place, and the MLP's
``silu(gate) * up`` (``rms_norm``, ``rope_``, ``silu_mul``), each one call where PyTorch
dispatches 2-10 operations, with Hugging Face's results (the rotation bit for bit; the norm's sum of
squares in another order, the same in bf16 on the tests' samples).

They are C++ with AVX-512 intrinsics (bfloat16 products on AVX512-BF16; on CPUs with AVX2 and
FMA but no AVX-512, ``decode_attention_avx2.cpp`` runs float32 attention and nothing else: 1.1x
PyTorch's AVX-512 flash kernel where measured, on an AVX-512 machine), compiled once per
machine with the system's C++ compiler (``$CXX``, else ``c++``/``g++``; ``-march=native
-fopenmp``) into ``~/.cache/arft/kernels`` (``$ARFT_KERNEL_CACHE``), keyed by the sources, the
compiler and the CPU, and loaded with ``ctypes``. Their OpenMP loops run on the calling thread's
pool of the OpenMP runtime torch already loaded (the same ``libgomp.so.1``): no threads added.

``load()`` gives them, or ``None`` where they cannot run here (no x86-64 CPU with AVX2 or AVX-512, no
compiler, a failed build: ``unavailable()`` says why, and the engine keeps PyTorch's). They sit
in ``arft.models`` so that the engine and the trainer can both use them. torch is imported lazily.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from arft.cpu.train_kernels import TrainKernels

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

KERNELS = Path(__file__).resolve().parent / "csrc"
SOURCES = (KERNELS / "decode_attention.cpp", KERNELS / "decode_attention_avx2.cpp", KERNELS / "small_ops.cpp",
           KERNELS / "train_attention.cpp", KERNELS / "train_ops.cpp")
HEADERS = (KERNELS / "vec.h",)
FLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-fopenmp", "-shared", "-fPIC", "-std=c++17")
AVX2_FLAGS = tuple(f for f in FLAGS if f != "-march=native") + ("-march=x86-64-v3",)
"""The build for a CPU with AVX2 and FMA but no AVX-512 (``compile_to``: tests and benchmarks here)."""
"""``-ffp-contract=off``: no multiply-add fused where PyTorch rounds the product first."""
GROUPS = range(1, 9)
"""Query heads per key/value head the kernel is built for."""
HEAD_DIMS = (32, 64, 128)
FLOAT32, BFLOAT16 = 1, 2
"""Bits of ``arft_decode_attention_caps()``: what the build can run on this CPU."""
_I64, _PTR = ctypes.c_int64, ctypes.c_void_p
_ARGS = ([_PTR, _I64, _I64, _I64] * 3 + [_PTR, _I64, _PTR, _I64, _I64, _I64, _PTR, _I64, _I64, _I64, _PTR, _PTR]
         + [_I64] * 5 + [ctypes.c_float, ctypes.c_int, ctypes.c_int])


class CpuKernels:
    """The loaded kernels: ``attend`` where ``supports``; ``rms_norm``, ``rope_``, ``silu_mul``
    where ``small_ops``."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._run = lib.arft_decode_attention
        self._run.argtypes, self._run.restype = _ARGS, ctypes.c_int
        self.caps = int(lib.arft_decode_attention_caps())
        self._norm, self._rope, self._silu = lib.arft_rms_norm, lib.arft_rope, lib.arft_silu_mul
        self._norm.argtypes = [_PTR, _I64] * 3 + [_PTR, _PTR] + [_I64] * 3 + [ctypes.c_float, _PTR] + [ctypes.c_int] * 2
        self._norm_back = lib.arft_rms_norm_backward
        self._norm_back.argtypes, self._norm_back.restype = [_PTR] * 5 + [_I64] * 2 + [ctypes.c_int] * 2, ctypes.c_int
        self._rope.argtypes = [_PTR] + [_I64] * 3 + [_PTR, _PTR] + [_I64] * 2 + [ctypes.c_int, ctypes.c_int]
        self._silu.argtypes = [_PTR, _I64] * 2 + [_PTR] + [_I64] * 2 + [ctypes.c_int, ctypes.c_int]
        self._norm.restype = self._rope.restype = self._silu.restype = ctypes.c_int
        self.small_ops = bool(lib.arft_small_ops_caps())
        """Whether ``rms_norm``, ``rope_`` and ``silu_mul`` run here (AVX-512)."""
        self.train = TrainKernels(lib)
        """The update's kernels (``arft.cpu.train_kernels``)."""

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
        m = (None, 0) if mask is None else (mask.data_ptr(), mask.stride(0))
        p = (None, 0, 0, 0, None, 0, 0, 0) if prior is None else (
            prior[0].data_ptr(), *prior[0].stride()[:3], prior[1].data_ptr(), *prior[1].stride())
        rc = self._run(q.data_ptr(), *q.stride()[:3], key.data_ptr(), *key.stride()[:3], value.data_ptr(),
                       *value.stride()[:3], *m, *p, out.data_ptr(), None, b, h, g, key.shape[2], d, scale,
                       int(q.dtype == torch.bfloat16), torch.get_num_threads())
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
        rc = self._norm(x.data_ptr(), dim, None if delta is None else delta.data_ptr(), dim,
                        None if delta is None else hidden.data_ptr(), dim, weight.data_ptr(), out.data_ptr(), dim,
                        rows, dim, eps, None if rstd is None else rstd.data_ptr(), int(x.dtype == torch.bfloat16),
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
        if self._norm_back(grad.data_ptr(), x.data_ptr(), weight.data_ptr(), rstd.data_ptr(), out.data_ptr(),
                           x.numel() // dim, dim, int(x.dtype == torch.bfloat16), torch.get_num_threads()):
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
        rc = self._rope(x.data_ptr(), stride, heads, head_dim, cos.data_ptr(), sin.data_ptr(), head_dim, rows,
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
        rc = self._silu(gate.data_ptr(), g_row, up.data_ptr(), u_row, out.data_ptr(), gate.numel() // gate.shape[-1],
                        gate.shape[-1], int(gate.dtype == torch.bfloat16), torch.get_num_threads())
        if rc:
            raise ValueError("arft CPU kernels: no silu_mul here; check CpuKernels.small_ops first")
        return out

    def fits(self, x: "torch.Tensor") -> bool:
        """Whether ``rms_norm``/``rope_`` take ``x``: on the CPU, a dtype the build runs, contiguous
        rows of a multiple of 16 values (at most 8192)."""
        return (self.small_ops and self.supports(x.dtype, 1, 64) and x.device.type == "cpu" and x.is_contiguous()
                and x.shape[-1] % 16 == 0 and x.shape[-1] <= 8192)


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


@functools.cache
def load() -> CpuKernels | None:
    """The kernel, built and loaded once a process; ``None`` where it cannot run (``unavailable``)."""
    import torch  # noqa: F401  (its OpenMP runtime loads first; the kernel's libgomp.so.1 is that one)

    reason = _cpu_reason()
    if reason is None:
        try:
            kernel, added = opened(_build())
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            reason = f"{exc}"
        else:
            if not kernel.caps:
                reason = "built without AVX2 or AVX-512 (the compiler's -march=native found neither)"
            elif added:  # torch with its own renamed libgomp (older wheels): two thread pools
                reason = (f"they brought a second OpenMP runtime beside torch's ({', '.join(added)}); "
                          "install torch>=2.7, whose libgomp.so.1 they share")
            else:
                log.info("arft's CPU kernels loaded (%s)", ", ".join(x.name for x in SOURCES))
                return kernel
    _REASONS.append(reason)
    log.warning("arft's CPU kernels are off, PyTorch's operations run instead: %s", reason)
    return None


_REASONS: list[str] = []


def unavailable() -> str | None:
    """Why ``load()`` gave ``None`` (``None`` while it has not been tried or when it loaded)."""
    return _REASONS[-1] if _REASONS else None


def opened(path: Path) -> tuple[CpuKernels, list[str]]:
    """The kernels in the library at ``path``, and the OpenMP runtimes loading it added to this
    process (none where it shares the one torch loaded)."""
    before = set(_openmp_runtimes())
    kernel = CpuKernels(ctypes.CDLL(str(path)))
    return kernel, sorted(set(_openmp_runtimes()) - before)


def _openmp_runtimes() -> list[str]:
    """The OpenMP runtime libraries this process has mapped (Linux; empty elsewhere)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return []
    names = {line.split()[-1] for line in maps.splitlines() if "/" in line}
    return sorted(n for n in names if Path(n).name.startswith(("libgomp", "libiomp", "libomp")))


def _cpu_reason() -> str | None:
    """Why this CPU cannot run the kernels (``None``: it can): they need x86-64 with AVX-512, or
    AVX2 and FMA (float32 decode attention only)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return f"they need an x86-64 CPU with AVX-512 or AVX2 (this is {platform.machine()})"
    flags = _cpu_flags()
    if {"avx512f", "avx512bw", "avx512dq"} <= flags or {"avx2", "fma"} <= flags:
        return None
    return "this CPU has neither AVX-512 nor AVX2 with FMA"


@functools.cache
def _cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (Linux's ``/proc/cpuinfo``; empty elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def _compiler() -> str:
    """The C++ compiler: ``$CXX``, else ``c++`` or ``g++`` on the PATH."""
    found = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not found:
        raise RuntimeError("no C++ compiler found (install g++, or set CXX to a C++17 compiler with OpenMP)")
    return found


def _build() -> Path:
    """The shared library for this source, compiler and CPU: built into the cache once (an
    atomic rename, so concurrent processes never load a half-written file)."""
    cxx = _compiler()
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30).stdout
    sources = [x.read_bytes() for x in SOURCES + HEADERS]
    key = hashlib.sha256(b"\0".join([*sources, " ".join(FLAGS).encode(), cxx.encode(), version.encode(),
                                     " ".join(sorted(_cpu_flags())).encode()])).hexdigest()[:16]
    cache = Path(os.environ.get("ARFT_KERNEL_CACHE", "~/.cache/arft/kernels")).expanduser()
    target = cache / f"decode_attention-{key}.so"
    if target.exists():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=cache, suffix=".so")
    os.close(fd)
    try:
        compile_to(Path(tmp))
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def compile_to(out: Path, flags: tuple[str, ...] = FLAGS) -> None:
    """Compile the kernels into the library ``out`` with ``flags`` (other targets than this CPU:
    e.g. ``-march=x86-64-v3`` for an AVX2 machine, as the tests and ``bench/decode_attention.py`` do)."""
    cxx = _compiler()
    done = subprocess.run([cxx, *flags, "-o", str(out), *map(str, SOURCES)], capture_output=True, text=True,
                          timeout=300)
    if done.returncode:
        raise RuntimeError(f"building {KERNELS.name}/*.cpp with {cxx} failed (exit {done.returncode}): "
                           f"{done.stderr.strip()[-600:]}; set CXX to a C++17 compiler with OpenMP")

"""arft's CPU kernels: the decode-attention kernel equals softmax attention (float32 and bfloat16,
masks with holes, short blocks, strided caches, a prior part merged in) and cascade attention on it
equals cascade attention on PyTorch's kernel; RMSNorm, the rotary embedding and silu(gate) * up
give Hugging Face's results; the engine samples the same tokens with them or without; where they
cannot be built they say why, and the engine keeps PyTorch's."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from arft.cpu import build, cascade
from arft.cpu import kernels as cpu_kernels
from arft.cpu.kernels import CpuKernels
from arft.engines.transformers.engine import TransformersEngine

KERNEL = cpu_kernels.load()
needs_kernel = pytest.mark.skipif(KERNEL is None, reason=f"arft CPU kernels unavailable: {cpu_kernels.unavailable()}")
needs_small_ops = pytest.mark.skipif(KERNEL is None or not KERNEL.small_ops,
                                     reason="arft's small CPU ops need AVX-512 (AVX2 builds run attention only)")
TOL = {torch.float32: 2e-5, torch.bfloat16: 2e-2}


def runs(dtype: torch.dtype, g: int = 3, d: int = 64) -> None:
    """Skip where this build does not run ``dtype`` (bfloat16 needs AVX512-BF16)."""
    if KERNEL is None or not KERNEL.supports(dtype, g, d):
        pytest.skip(f"{dtype} attention not built for this CPU")


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
              scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention in float64: output ``[B, H, G, D]`` and log-sum-exp ``[B, H, G]``."""
    scores = torch.einsum("bhgd,bhtd->bhgt", q.double(), k.double()) * scale
    if mask is not None:
        scores = scores + mask.double()[:, None, None, :]
    lse = scores.logsumexp(-1)
    return torch.einsum("bhgt,bhtd->bhgd", (scores - lse[..., None]).exp(), v.double()), lse


def inputs(b: int, h: int, g: int, d: int, t: int, dtype: torch.dtype, seed: int = 0
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Queries, and keys/values as leading views of a larger cache (as the engine's are), and an
    additive mask with holes: a whole-block one, a partial one, a row with one real column."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, g, d, generator=gen).to(dtype)
    kbuf, vbuf = (torch.randn(b, h, t + 9, d, generator=gen).to(dtype) for _ in range(2))
    keep = torch.ones(b, t + 9, dtype=torch.bool)
    keep[0, : max(t - 1, 0)] = False  # only the last column
    if b > 1:
        keep[1, 1: min(t - 1, 35)] = False  # a hole spanning blocks
    if b > 2:
        keep[2, ::3] = False
        keep[2, t - 1] = True
    mask = cascade.additive(keep, dtype)
    return q, kbuf[:, :, :t], vbuf[:, :, :t], mask[:, :t]


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("g", "d"), [(3, 64), (1, 32), (4, 128)])
@pytest.mark.parametrize("t", [1, 7, 16, 17, 50])
def test_equals_softmax_attention(dtype: torch.dtype, g: int, d: int, t: int) -> None:
    runs(dtype, g, d)
    assert KERNEL is not None
    q, k, v, mask = inputs(4, 2, g, d, t, dtype)
    scale = 1 / math.sqrt(d)
    want, _ = reference(q, k, v, mask, scale)
    got = KERNEL.attend(q, k, v, mask, scale)
    assert got.dtype == dtype and got.shape == q.shape and got.is_contiguous()
    assert torch.allclose(got.double(), want, atol=TOL[dtype]), (got.double() - want).abs().max()
    unmasked, _ = reference(q, k, v, None, scale)
    assert torch.allclose(KERNEL.attend(q, k, v, None, scale).double(), unmasked, atol=TOL[dtype])


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_merges_a_prior_part(dtype: torch.dtype) -> None:
    """Columns ``[0, 20)`` by PyTorch's kernel (its output and log-sum-exp, the layout it returns),
    the rest by the kernel starting from them: attention over all columns."""
    runs(dtype)
    q, k, v, mask = inputs(3, 3, 3, 64, 45, dtype, seed=1)
    mask = mask.clone()
    mask[1, 20:44] = float("-inf")  # a row with nothing of its own but its last column
    mask[0, 5] = 0  # PyTorch's kernel gives a row with no column a log-sum-exp of 0, not -inf
    prior = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q, k[:, :, :20], v[:, :, :20], attn_mask=mask[:, None, None, :20], scale=0.125)
    got = KERNEL.attend(q, k[:, :, 20:], v[:, :, 20:], mask[:, 20:], 0.125, prior)  # type: ignore[union-attr]
    want, _ = reference(q, k, v, mask, 0.125)
    assert torch.allclose(got.double(), want, atol=TOL[dtype]), (got.double() - want).abs().max()


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shared", [0, 5, cascade.MIN_SHARED + 3])
def test_cascade_attention_on_it_equals_pytorchs_kernel(dtype: torch.dtype, shared: int) -> None:
    """``cascade.attend`` of a decode step: the kernel path (prefix read once where ``reads_once``,
    too short a prefix read by each row) against the flash path with its hole split."""
    runs(dtype)
    b, t = 5, 60
    gen = torch.Generator().manual_seed(shared)
    query = torch.randn(b, 6, 1, 64, generator=gen).to(dtype)
    key, value = (torch.randn(b, 2, t, 64, generator=gen).to(dtype) for _ in range(2))
    key[:, :, :shared], value[:, :, :shared] = key[:1, :, :shared], value[:1, :, :shared]
    keep = torch.ones(b, t, dtype=torch.long)
    keep[1, shared: shared + 30] = keep[3, shared: t - 2] = 0  # holes after the shared columns
    mask = cascade.additive(keep.bool()[:, None, None, :], dtype)
    split = cascade.hole_split(keep, shared)
    want = cascade.attend(query, key, value, mask, shared, 0.125, split)
    got = cascade.attend(query, key, value, mask, shared, 0.125, None, KERNEL)
    assert got.shape == want.shape == (b, 1, 6, 64)
    assert torch.allclose(got.float(), want.float(), atol=TOL[dtype]), (got.float() - want.float()).abs().max()


@needs_kernel
def test_refuses_what_it_does_not_run() -> None:
    kernel = KERNEL
    assert kernel is not None
    assert not kernel.supports(torch.float16, 3, 64) and not kernel.supports(torch.float32, 3, 80)
    assert not kernel.supports(torch.float32, 9, 64)
    q, k, v, _ = inputs(2, 2, 3, 64, 10, torch.float32)
    with pytest.raises(ValueError, match="contiguous last dimension"):
        kernel.attend(q, k.transpose(-1, -2).contiguous().transpose(-1, -2), v, None, 0.125)
    with pytest.raises(ValueError, match="not built here"):
        kernel.attend(q[..., :48].contiguous(), k[..., :48], v[..., :48], None, 0.125)
    with pytest.raises(ValueError, match="attend got shapes"):  # a mask of one row for two
        kernel.attend(q, k, v, torch.zeros(1, 10), 0.125)
    with pytest.raises(ValueError, match="one row per row of x"):  # cos/sin of one row for two
        kernel.rope_(torch.zeros(2, 3, 64), 1, 64, torch.zeros(1, 3, 64), torch.zeros(1, 3, 64))
    with pytest.raises(ValueError, match="weight of x's dtype"):
        kernel.rms_norm(torch.zeros(2, 64), torch.ones(64, dtype=torch.bfloat16), 1e-5)


@needs_kernel
def test_they_share_torchs_openmp_runtime(tmp_path: Path) -> None:
    """Loaded beside torch, the kernels' libgomp.so.1 is torch's: loading them adds no OpenMP
    runtime (other libraries may bring their own, as scikit-learn's wheels do)."""
    import shutil

    copies = {b.name: Path(shutil.copy(b.path, tmp_path / f"{b.name}.so"))  # libraries this process has not opened
              for b in build.build_all() if b.path is not None}
    kernels, added = cpu_kernels.opened(copies)
    assert kernels.caps == KERNEL.caps and added == []  # type: ignore[union-attr]
    assert any("gomp" in Path(r).name or "omp" in Path(r).name for r in cpu_kernels._openmp_runtimes())


def test_they_build_wherever_the_cpu_and_a_compiler_allow() -> None:
    """The other tests skip where the kernels do not load; on an AVX-512 CPU with a C++ compiler a
    failed build is a failure here, not a skip."""
    import shutil

    if build.cpu_reason() is not None or not (shutil.which("c++") or shutil.which("g++")):
        pytest.skip(f"no AVX2/AVX-512 or no compiler here: {build.cpu_reason()}")
    assert KERNEL is not None, cpu_kernels.unavailable()
    assert KERNEL.caps & cpu_kernels.FLOAT32
    if "avx512f" in build.cpu_flags():
        assert KERNEL.small_ops
    if "avx512_bf16" in build.cpu_flags():
        assert KERNEL.caps & cpu_kernels.BFLOAT16


def test_without_avx512_bf16_the_small_ops_round_alike(tmp_path: Path) -> None:
    """Built for an AVX-512 CPU without AVX512-BF16 (as Ice Lake servers are), the small ops round
    to bfloat16 in integer operations, bit for bit as ``vcvtneps2bf16`` does; the attention kernel
    then runs float32 only."""

    if KERNEL is None or not KERNEL.caps & cpu_kernels.BFLOAT16:
        pytest.skip("needs a CPU with AVX512-BF16 to compare against")
    lib = tmp_path / "nobf16.so"
    build.compile_to(lib, build.FLAGS + ("-mno-avx512bf16",))
    other = cpu_kernels.from_library(lib)
    assert other.caps == cpu_kernels.FLOAT32 and other.small_ops
    gen = torch.Generator().manual_seed(5)
    x, delta = ((3 * torch.randn(8, 96, generator=gen)).to(torch.bfloat16) for _ in range(2))
    weight = torch.randn(96, generator=gen).to(torch.bfloat16)
    x[0, :2] = float("nan")
    for a, b in zip(KERNEL.rms_norm(x, weight, 1e-5, delta), other.rms_norm(x, weight, 1e-5, delta)):
        assert torch.equal(a[1:], b[1:]) and torch.equal(a[0].isnan(), b[0].isnan()) and a[0].isnan().any()
    gate, up = x[1:], delta[1:]
    assert torch.equal(KERNEL.silu_mul(gate, up), other.silu_mul(gate, up))


@pytest.fixture(scope="module")
def avx2(tmp_path_factory: pytest.TempPathFactory) -> CpuKernels:
    """The kernels built for a CPU with AVX2 and no AVX-512 (most laptops): float32 decode
    attention only (``decode_attention_avx2.cpp``)."""
    if "avx2" not in build.cpu_flags() or "fma" not in build.cpu_flags():
        pytest.skip("needs a CPU with AVX2 and FMA to run the AVX2 build")
    lib = tmp_path_factory.mktemp("avx2") / "avx2.so"
    build.compile_to(lib, build.AVX2_FLAGS)
    return cpu_kernels.from_library(lib)


def test_an_avx2_build_runs_float32_attention(avx2: CpuKernels) -> None:
    """Softmax attention, holes, short blocks and a prior merged in, as the AVX-512 build."""
    assert avx2.caps == cpu_kernels.FLOAT32 and not avx2.small_ops
    for t, (g, d) in [(1, (3, 64)), (13, (1, 32)), (45, (4, 128))]:
        q, k, v, mask = inputs(4, 2, g, d, t, torch.float32, seed=t)
        want, _ = reference(q, k, v, mask, 0.125)
        assert torch.allclose(avx2.attend(q, k, v, mask, 0.125).double(), want, atol=2e-5)
    q, k, v, mask = inputs(3, 3, 3, 64, 45, torch.float32, seed=1)
    mask[0, 5] = 0
    prior = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q, k[:, :, :20], v[:, :, :20], attn_mask=mask[:, None, None, :20], scale=0.125)
    want, _ = reference(q, k, v, mask, 0.125)
    got = avx2.attend(q, k[:, :, 20:], v[:, :, 20:], mask[:, 20:].contiguous(), 0.125, prior)
    assert torch.allclose(got.double(), want, atol=2e-5)


def test_a_failed_build_says_what_to_do(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    failing = tmp_path / "cxx"
    failing.write_text("#!/bin/sh\n[ \"$1\" = --version ] && echo fake 1.0 && exit 0\n"
                       "echo 'no such flag' >&2\nexit 3\n")
    failing.chmod(0o755)
    monkeypatch.setenv("CXX", str(failing))
    monkeypatch.setenv("ARFT_KERNEL_CACHE", str(tmp_path / "cache"))
    with pytest.raises(RuntimeError, match=r"failed \(exit 3\): no such flag; set CXX"):
        build.build("small_ops")
    assert not list((tmp_path / "cache").iterdir())  # nothing half-written left behind


def test_a_cpu_without_avx2_or_avx512_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build, "cpu_flags", lambda: frozenset({"avx", "sse4_2"}))
    monkeypatch.setattr(build.platform, "machine", lambda: "x86_64")
    assert build.cpu_reason() == "this CPU has neither AVX-512 nor AVX2 with FMA"
    monkeypatch.setattr(build, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
    assert build.cpu_reason() is None  # float32 decode attention on AVX2
    monkeypatch.setattr(build.platform, "machine", lambda: "arm64")
    assert "x86-64" in str(build.cpu_reason())


@needs_kernel
def test_the_build_is_cached_per_source_and_reused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ARFT_KERNEL_CACHE", str(tmp_path))
    first = {b.name: b.path for b in build.build_all()}
    assert all(path is not None and path.parent == tmp_path for path in first.values())
    mtimes = {name: path.stat().st_mtime_ns for name, path in first.items()}  # type: ignore[union-attr]
    assert {b.name: b.path for b in build.build_all()} == first
    assert {name: path.stat().st_mtime_ns for name, path in first.items()} == mtimes  # type: ignore[union-attr]
    assert cpu_kernels.opened(first)[0].caps == KERNEL.caps  # type: ignore[arg-type, union-attr]


@needs_kernel
async def test_the_engine_samples_the_same_tokens_with_it_or_without(tokenizer: Any) -> None:
    """Greedy and seeded sampling, same tokens and logprobs: rows of different lengths (holes),
    a system prompt every row shares (its part merged in), rows joining a running batch."""
    from tests.unit.engines.transformers.test_fused_pass import same_samples
    from tests.unit.engines.transformers.test_engine import varied_model

    torch.set_num_threads(1)
    model = varied_model(tokenizer, seed=4)
    on = TransformersEngine(model, tokenizer, max_batch_size=4)
    off = TransformersEngine(copy.deepcopy(model), tokenizer, max_batch_size=4, cpu_kernels=False)
    assert on._pass.fused is not None and on._pass.fused.kernel is KERNEL
    assert off._pass.fused is not None and off._pass.fused.kernel is None
    system = list(range(300, 300 + cascade.MIN_SHARED + 8))
    prompts = [system + [400 + i] * (3 + 9 * i) for i in range(5)]
    try:
        await same_samples(on, off, prompts)
        assert on.stats.cascade_steps > 0
    finally:
        await on.aclose()
        await off.aclose()


@needs_small_ops
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("residual", [False, True])
def test_rms_norm_is_hugging_faces(dtype: torch.dtype, residual: bool) -> None:
    """``LlamaRMSNorm`` of ``x (+ delta)``: bit for bit in bfloat16 (float32: the sum of squares in
    another order); the sum itself exactly ``x + delta``."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    kernel = KERNEL
    assert kernel is not None and kernel.small_ops
    gen = torch.Generator().manual_seed(2)
    x, delta = (torch.randn(3, 5, 96, generator=gen).to(dtype) for _ in range(2))
    norm = LlamaRMSNorm(96, eps=1e-5).to(dtype)
    norm.weight.data = (1 + 0.3 * torch.randn(96, generator=gen)).to(dtype)
    assert kernel.fits(x)
    got, hidden = kernel.rms_norm(x, norm.weight, norm.variance_epsilon, delta if residual else None)
    want_hidden = x + delta if residual else x
    assert torch.equal(hidden, want_hidden)
    want = norm(want_hidden)
    if dtype == torch.bfloat16:
        assert torch.equal(got, want)
    else:
        assert torch.allclose(got, want, atol=1e-6)


@needs_small_ops
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rope_is_hugging_faces(dtype: torch.dtype) -> None:
    """Queries and keys in one product's rows, rotated in place: Hugging Face's
    ``apply_rotary_pos_emb`` bit for bit; the values after them untouched."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    kernel = KERNEL
    assert kernel is not None
    gen = torch.Generator().manual_seed(3)
    b, s, d = 2, 3, 32
    qkv = torch.randn(b, s, (4 + 2 + 2) * d, generator=gen).to(dtype)
    cos, sin = (torch.randn(b, s, d, generator=gen).to(dtype) for _ in range(2))
    q, k = qkv[..., : 4 * d].view(b, s, 4, d).transpose(1, 2), qkv[..., 4 * d: 6 * d].view(b, s, 2, d).transpose(1, 2)
    want_q, want_k = apply_rotary_pos_emb(q, k, cos, sin)
    mine = qkv.clone()
    kernel.rope_(mine, 6, d, cos, sin)
    assert torch.equal(mine[..., : 4 * d].view(b, s, 4, d).transpose(1, 2), want_q)
    assert torch.equal(mine[..., 4 * d: 6 * d].view(b, s, 2, d).transpose(1, 2), want_k)
    assert torch.equal(mine[..., 6 * d:], qkv[..., 6 * d:])
    with pytest.raises(ValueError, match="evenly strided rows"):
        kernel.rope_(mine.transpose(0, 1), 6, d, cos, sin)


def test_rows_of_tells_evenly_strided_rows() -> None:
    x = torch.zeros(4, 3, 10)
    assert cpu_kernels.rows_of(x) == 10
    assert cpu_kernels.rows_of(x[..., :6]) == 10  # a leading slice of each row: rows 10 apart
    assert cpu_kernels.rows_of(x[:, :2]) is None  # rows 10 apart within a block, 30 between blocks
    assert cpu_kernels.rows_of(x[:, :1]) == 30
    assert cpu_kernels.rows_of(x.transpose(-1, -2)) is None


@needs_small_ops
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_silu_mul_is_pytorchs(dtype: torch.dtype) -> None:
    """``F.silu(gate) * up`` from the two halves of one product's rows (and from separate
    tensors): within an ulp of PyTorch's silu (its exp is arft's polynomial), through extremes."""
    import torch.nn.functional as F

    kernel = KERNEL
    assert kernel is not None
    gen = torch.Generator().manual_seed(4)
    gu = (4 * torch.randn(2, 5, 2 * 48, generator=gen)).to(dtype)
    gu[0, 0, :6] = torch.tensor([-100.0, 100.0, 0.0, -88.0, 89.0, -1e-3]).to(dtype)
    gate, up = gu[..., :48], gu[..., 48:]
    want = F.silu(gate) * up
    for got in (kernel.silu_mul(gate, up), kernel.silu_mul(gate.contiguous(), up.contiguous())):
        assert got.shape == want.shape and got.is_contiguous() and got.dtype == dtype
        assert torch.allclose(got.float(), want.float(), rtol=8e-3 if dtype == torch.bfloat16 else 1e-6, atol=0)
    with pytest.raises(ValueError, match="one shape and dtype"):
        kernel.silu_mul(gate, up[..., :40])


async def test_the_engine_on_an_avx2_build_samples_the_same_tokens(
        tokenizer: Any, avx2: CpuKernels, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a CPU with AVX2 only, the fused pass runs the AVX2 attention and PyTorch's norm, rotary
    and activation: the same tokens and logprobs as without the kernels."""
    from arft.engines.transformers import model_pass
    from tests.unit.engines.transformers.test_fused_pass import same_samples
    from tests.unit.engines.transformers.test_engine import varied_model

    monkeypatch.setattr(model_pass, "load_kernel", lambda: avx2)
    torch.set_num_threads(1)
    model = varied_model(tokenizer, seed=5)
    on = TransformersEngine(model, tokenizer, max_batch_size=4)
    off = TransformersEngine(copy.deepcopy(model), tokenizer, max_batch_size=4, cpu_kernels=False)
    assert on._pass.fused is not None and on._pass.fused.kernel is avx2
    prompts = [list(range(300, 300 + cascade.MIN_SHARED + 4)) + [400 + i] * (2 + 7 * i) for i in range(4)]
    try:
        await same_samples(on, off, prompts)
    finally:
        await on.aclose()
        await off.aclose()

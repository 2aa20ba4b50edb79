"""arft's decode-attention kernel beats PyTorch's CPU flash kernel at a decode step's shapes (AVX-512, AVX2).

A decode step's attention over the rows' own columns: PyTorch's CPU flash-attention kernel vs
arft's kernel (``arft.cpu.kernels``), on the same inputs in one run.

The shape is the embedded model's decode step at a full batch: 32 rows, 3 key/value heads of 64,
3 query heads each, a few rows with a masked hole, at several row lengths. Each size is timed
alternating ``flash, arft[, arft-avx2]`` (``--avx2``: the kernels also built for a CPU with AVX2
and no AVX-512, as most laptops are, and timed here; float32 only) and the median of
``--repeats`` calls is printed with the ratios. Correctness is checked on the same inputs.

    python -m bench run decode_attention [--lengths 100 300 600] [--dtype bfloat16 float32] [--avx2]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from bench.lib.harness import record

NEEDS = {"avx512"}  # the kernels run on AVX-512 CPUs (their AVX2 build is measured there too)
QUICK = ["--lengths", "100", "--repeats", "10"]


def timed(arms: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
    """Median milliseconds of each arm over ``repeats`` calls, the arms taking turns call by call
    (after 5 warm-up calls each)."""
    for fn in arms.values():
        for _ in range(5):
            fn()
    times: dict[str, list[float]] = {name: [] for name in arms}
    for _ in range(repeats):
        for name, fn in arms.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return {name: statistics.median(ts) * 1e3 for name, ts in times.items()}


def avx2_build(out: Path) -> Any:
    """The kernels compiled for x86-64-v3 (AVX2 and FMA, no AVX-512)."""
    from arft.cpu import build, kernels as cpu_kernels

    build.compile_to(out, build.AVX2_FLAGS)
    return cpu_kernels.from_library(out)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=3)
    ap.add_argument("--group", type=int, default=3, help="query heads per key/value head (default 3)")
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--lengths", type=int, nargs="+", default=[100, 300, 600])
    ap.add_argument("--dtype", nargs="+", default=["bfloat16", "float32"], choices=["bfloat16", "float32"])
    ap.add_argument("--repeats", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--avx2", action="store_true", help="also time the AVX2 build (float32)")
    args = ap.parse_args(argv)

    import torch

    from arft.cpu import kernels as cpu_kernels

    torch.set_num_threads(args.threads)
    kernels = cpu_kernels.load()
    if kernels is None:
        raise SystemExit(f"arft's CPU kernels do not run here: {cpu_kernels.unavailable()}")
    avx2 = avx2_build(Path(tempfile.mkdtemp()) / "avx2.so") if args.avx2 else None
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    b, h, g, d = args.rows, args.kv_heads, args.group, args.head_dim
    print(f"{b} rows x {h} kv heads x {g} queries x {d}, {args.threads} threads, median of {args.repeats} calls")
    result: dict[str, Any] = {"rows": b, "kv_heads": h, "group": g, "head_dim": d, "ms": {}}
    for name in args.dtype:
        dtype = getattr(torch, name)
        if not kernels.supports(dtype, g, d):
            print(f"  {name}: not built for this CPU")
            continue
        for t in args.lengths:
            gen = torch.Generator().manual_seed(t)
            q = torch.randn(b, h, g, d, generator=gen).to(dtype)
            k, v = (torch.randn(b, h, t + 32, d, generator=gen).to(dtype)[:, :, :t] for _ in range(2))
            mask = torch.zeros(b, t, dtype=dtype)
            mask[: b // 6, : t // 3] = float("-inf")  # rows with a hole
            arms = {"flash": lambda: flash(q, k, v, attn_mask=mask[:, None, None], scale=d ** -0.5),
                    "arft": lambda: kernels.attend(q, k, v, mask, d ** -0.5)}
            if avx2 is not None and dtype == torch.float32:
                arms["arft-avx2"] = lambda: avx2.attend(q, k, v, mask, d ** -0.5)
            want = arms["flash"]()[0].float()
            errors = {n: (fn().float() - want).abs().max().item() for n, fn in arms.items() if n != "flash"}
            ms = timed(arms, args.repeats)
            ratios = " | ".join(f"{n} {ms['flash'] / ms[n]:.2f}x (max diff {errors[n]:.1e})" for n in errors)
            print(f"  {name} T={t}: " + ", ".join(f"{n} {m:.3f} ms" for n, m in ms.items()) + f" -> {ratios}")
            result["ms"][f"{name} T={t}"] = {**ms, "max_diff": errors}
    record("decode_attention", result)


if __name__ == "__main__":
    main()

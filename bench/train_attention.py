"""arft's AMX kernels run the update's attention forward and backward faster than PyTorch's, as precisely.

Causal attention in the update: PyTorch's CPU flash-attention forward and backward vs arft's AMX
kernels (``arft.cpu.train_attention``, ``cpu/csrc/train_attention.cpp``), alternating call by
call on the same inputs in one run, at the embedded model's shapes (9 query heads on 3 key/value
heads of 64) and the update's micro-batches (3 sequences of 512 by default).

Each arm's time is the median over ``--repeats`` calls; the backward is timed alone (from the
forward's saved output and log-sum-exp). Also prints each arm's largest error against float64 on
the same inputs, so the speed is not bought with precision.

    python -m bench run train_attention [--batch 3] [--len 512] [--repeats 20] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any, Sequence

from bench.lib.harness import record

NEEDS = {"amx"}  # the kernels run on AMX tiles (Intel Sapphire Rapids and later)
QUICK = ["--batch", "1", "--len", "128", "--repeats", "3"]


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=3)
    ap.add_argument("--len", type=int, default=512)
    ap.add_argument("--heads", type=int, default=9)
    ap.add_argument("--kv-heads", type=int, default=3)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)

    import torch

    from arft.cpu import kernels as cpu_kernels

    torch.set_num_threads(args.threads)
    kernels = cpu_kernels.load()
    if kernels is None or not kernels.train.attention_backward_runs:
        sys.exit("arft's attention kernels do not run here: they need AMX (Intel Sapphire Rapids or later) "
                 f"and the CPU kernels ({cpu_kernels.unavailable() or 'loaded, but no AMX'})")
    b, h, g, t, d = args.batch, args.heads, args.kv_heads, args.len, args.head_dim
    gen = torch.Generator().manual_seed(0)
    q, k, v, grad = (torch.randn(b, n, t, d, generator=gen).bfloat16() for n in (h, g, g, h))
    scale = d ** -0.5
    ref_out, ref_grads = reference(q, k, v, grad, scale)
    theirs = [x.clone().requires_grad_() for x in (q, k, v)]
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(*theirs, 0.0, True, scale=scale)
    my_out, my_lse = kernels.train.attention_forward(q, k, v, None, scale)
    arms = {
        "forward": (lambda: torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, True,
                                                                                       scale=scale),
                    lambda: kernels.train.attention_forward(q, k, v, None, scale)),
        "backward": (lambda: torch.autograd.grad(out, theirs, grad, retain_graph=True),
                     lambda: kernels.train.attention_backward(q, k, v, my_out, grad, my_lse, None, scale)),
    }
    flops = {"forward": 2 * 2 * b * h * t * t * d / 2, "backward": 5 * 2 * b * h * t * t * d / 2}  # causal half
    print(f"causal attention, {b} x {t} tokens, {h} query heads on {g} key/value heads of {d}, bf16, "
          f"{args.threads} threads, median of {args.repeats}, alternating call by call")
    result: dict[str, Any] = {"batch": b, "len": t, "heads": h, "kv_heads": g, "head_dim": d}
    for name, (torch_call, arft_call) in arms.items():
        times: dict[str, list[float]] = {"PyTorch flash": [], "arft AMX": []}
        torch_call(), arft_call()  # warm-up
        for _ in range(args.repeats):
            for arm, call in (("PyTorch flash", torch_call), ("arft AMX", arft_call)):
                start = time.perf_counter()
                call()
                times[arm].append(time.perf_counter() - start)
        pt, mine = (statistics.median(x) for x in times.values())
        print(f"  {name}: PyTorch {pt * 1e3:.2f} ms ({flops[name] / pt / 1e9:.0f} GFLOP/s), arft {mine * 1e3:.2f} ms "
              f"({flops[name] / mine / 1e9:.0f} GFLOP/s): {pt / mine:.2f}x")
        result[name] = {"pytorch_ms": pt * 1e3, "arft_ms": mine * 1e3, "ratio": pt / mine}
    their_grads = torch.autograd.grad(out, theirs, grad)
    my_grads = kernels.train.attention_backward(q, k, v, my_out, grad, my_lse, None, scale)
    err = {name: [float((x.detach().double() - ref).abs().max()) for x, ref in zip(xs, (ref_out, *ref_grads))]
           for name, xs in (("PyTorch", (out, *their_grads)), ("arft", (my_out, *my_grads)))}
    for name, e in err.items():
        print(f"  {name} largest error vs float64: out {e[0]:.4f}, dq {e[1]:.4f}, dk {e[2]:.4f}, dv {e[3]:.4f}")
    record("train_attention", {**result, "errors_vs_float64": err})


def reference(q, k, v, grad, scale):  # type: ignore[no-untyped-def]
    """float64 causal attention's output and gradients (the key/value heads repeated)."""
    import torch

    group = q.shape[1] // k.shape[1]
    qf, kf, vf = (x.double().requires_grad_() for x in (q, k, v))
    s = qf @ kf.repeat_interleave(group, 1).transpose(-1, -2) * scale
    s = s.masked_fill(torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).triu(1), float("-inf"))
    out = s.softmax(-1) @ vf.repeat_interleave(group, 1)
    return out.detach(), torch.autograd.grad(out, (qf, kf, vf), grad.double())


if __name__ == "__main__":
    main()

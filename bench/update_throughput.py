"""Update throughput: tokens/s of one policy-gradient update at 8 x 512 tokens, against the bf16
matmul peak of this machine measured in the same run, and the peak RSS.

The update is the trainer's own (`Learner.update`: LoRA, bf16 autocast, logits only at the
sampled positions), on the embedded SmolLM2-135M, with the loss on the last 180 tokens of each
sequence (a realistic share of sampled tokens). Model FLOPs per token: 2N forward + 2N backward
through the activations (LoRA leaves the base weights frozen, so no 2N weight-gradient term)
+ attention. Goals: >= 60 % of the matmul peak, <= 6 GB peak RSS.

    python bench/update_throughput.py [--seqs 8] [--len 512] [--repeats 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def matmul_peak(threads: int, n: int = 2048, repeats: int = 10) -> float:
    """bf16 GFLOP/s of an n x n matmul (best of ``repeats``)."""
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(n, n, dtype=torch.bfloat16), torch.randn(n, n, dtype=torch.bfloat16)
    a @ b  # warm-up
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t)
    return 2 * n ** 3 / best / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seqs", type=int, default=8)
    ap.add_argument("--len", type=int, default=512)
    ap.add_argument("--sampled", type=int, default=180)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--micro", type=int, default=None, help="micro-batch size (default: the trainer's)")
    ap.add_argument("--checkpointing", action="store_true", help="gradient checkpointing")
    args = ap.parse_args()

    import random

    import torch

    from arft.config import TrainingSpec
    from arft.models.loading import load_model
    from arft.records import TrainBatch
    from arft.trainer.learner import Learner, wrap_policy

    torch.set_num_threads(args.threads)
    model, tok = load_model("smollm2-135m-instruct")
    n_params = sum(p.numel() for p in model.parameters())
    cfg = model.config
    spec = TrainingSpec(gradient_checkpointing=args.checkpointing,
                        **({"micro_batch_size": args.micro} if args.micro else {}))
    learner = Learner(wrap_policy(model, spec, 0), spec, lr=1e-5, total_steps=100, temperature=1.0, pad_id=0)
    rng = random.Random(0)
    ids = tuple(tuple(rng.randrange(3, len(tok)) for _ in range(args.len)) for _ in range(args.seqs))
    mask = tuple((0,) * (args.len - args.sampled) + (1,) * args.sampled for _ in range(args.seqs))
    batch = TrainBatch(input_ids=ids, loss_mask=mask,
                       old_logprobs=tuple(tuple(-5.0 * m for m in row) for row in mask),
                       advantages=tuple(rng.choice([-1.0, 1.0]) for _ in range(args.seqs)), trace_ids=("x",) * args.seqs)
    learner.update(batch)  # warm-up
    times = []
    peaks = []
    for _ in range(args.repeats):
        peaks.append(matmul_peak(args.threads))
        t = time.perf_counter()
        learner.update(batch)
        times.append(time.perf_counter() - t)
    tokens = args.seqs * args.len
    t_med = statistics.median(times)
    tok_s = tokens / t_med
    # 4N per token (fwd 2N + activation-grad bwd 2N) + attention fwd+bwd (~3 x 2 * L * T * d per token)
    attn = 3 * 2 * cfg.num_hidden_layers * args.len * cfg.hidden_size
    achieved = (4 * n_params + attn) * tok_s / 1e9
    peak = statistics.median(peaks)
    rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2
    print(f"update {args.seqs} x {args.len} tokens (loss on {args.sampled}/seq), LoRA, bf16 autocast, "
          f"micro-batch {spec.micro_batch_size}, checkpointing {spec.gradient_checkpointing}, "
          f"{args.threads} threads, median of {args.repeats}")
    print(f"  update: {t_med:.2f} s = {tok_s:.0f} tok/s = {achieved:.1f} GFLOP/s (model FLOPs)")
    print(f"  bf16 matmul peak (2048^2, same run): {peak:.1f} GFLOP/s")
    print(f"  ratio update/peak: {achieved / peak:.2f} (goal >= 0.60)")
    print(f"  peak RSS: {rss_gb:.2f} GB (goal <= 6 GB)")


if __name__ == "__main__":
    main()

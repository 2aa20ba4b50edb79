"""An update reaches >= 0.30 of the CPU's matmul peak within 6 GB; share_prefix, fused LoRA, kernels speed it up.

Update throughput: tokens/s of one policy-gradient update at 8 x 512 tokens, against the
matmul peak of this machine in the dtype the update runs in (bf16 where the CPU runs it natively
and the trainer autocasts, else float32), measured in the same run, and the peak RSS.

The update is the trainer's own (`Learner.update`: LoRA, logits only at the sampled positions),
on the embedded SmolLM2-135M, with the loss on the last 180 tokens of each sequence (a realistic
share of sampled tokens). Model FLOPs per token: 2N forward + 2N backward through the activations
(LoRA leaves the base weights frozen, so no 2N weight-gradient term) + attention. Goals (issue
17): >= 0.30 of the matmul peak, <= 6 GB peak RSS.

``--shared N``: the sequences come in groups of ``--group`` (default 4; ``--group`` = ``--seqs``:
all share it, as the calculator demo's rows share their worked examples) that start with the
same N tokens, as a task's rollouts share their prompt. Then the update runs
with ``training.share_prefix`` off and on, alternating in the same run, and the ratio is printed
(tokens/s counts every token of every sequence, shared or not).

``--fused``: the update with ``training.fused_lora`` off (peft's LoRA layers) and on (each LoRA
linear layer one function), alternating in the same run, and the ratio (``share_prefix`` as
``--shared`` says).

``--kernels``: the update with ``training.cpu_kernels`` off (Hugging Face's RMSNorm) and on (each
RMSNorm, rotation, MLP product, attention and logprobs on arft's CPU kernels, ``arft.cpu.ops``), alternating,
and the ratio.

    python -m bench run update_throughput [--seqs 8] [--len 512] [--repeats 3] [--threads 2]
    python -m bench run update_throughput --shared 320     # share_prefix off vs on
    python -m bench run update_throughput --shared 320 --arms on   # one arm: its own peak RSS
    python -m bench run update_throughput --fused                  # fused_lora off vs on
    python -m bench run update_throughput --kernels                # cpu_kernels off vs on
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from typing import Any, Sequence

from bench.lib.harness import record

QUICK = ["--seqs", "2", "--len", "64", "--sampled", "16", "--repeats", "1"]


def matmul_peak(threads: int, dtype: str, n: int = 2048, repeats: int = 10) -> float:
    """GFLOP/s of an n x n matmul in ``dtype`` (best of ``repeats``)."""
    import torch

    torch.set_num_threads(threads)
    a, b = (torch.randn(n, n, dtype=getattr(torch, dtype)) for _ in range(2))
    a @ b  # warm-up
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t)
    return 2 * n ** 3 / best / 1e9


def make_batch(args: argparse.Namespace, vocab: int) -> Any:
    """Random sequences, the loss on their last ``--sampled`` tokens; with ``--shared``, each
    group of ``--group`` starts with the same tokens."""
    import random

    from arft.records import TrainBatch

    rng = random.Random(0)
    ids = []
    for i in range(args.seqs):
        if i % args.group == 0:
            shared = [rng.randrange(3, vocab) for _ in range(args.shared)]
        ids.append(tuple(shared + [rng.randrange(3, vocab) for _ in range(args.len - args.shared)]))
    mask = tuple((0,) * (args.len - args.sampled) + (1,) * args.sampled for _ in range(args.seqs))
    return TrainBatch(input_ids=tuple(ids), loss_mask=mask,
                      old_logprobs=tuple(tuple(-5.0 * m for m in row) for row in mask),
                      advantages=tuple(rng.choice([-1.0, 1.0]) for _ in range(args.seqs)),
                      trace_ids=("x",) * args.seqs)


def compared_arms(args: argparse.Namespace) -> dict[str, dict[str, bool]]:
    """The arms as name -> TrainingSpec switches: share_prefix off/on with ``--shared``,
    fused_lora off/on with ``--fused`` (share_prefix on where ``--shared`` is given), else one."""
    share = bool(args.shared)
    if args.fused:
        arms = {f"fused_lora {s}": {"share_prefix": share, "fused_lora": s == "on", "cpu_kernels": True}
                for s in ("off", "on")}
    elif args.kernels:
        arms = {f"cpu_kernels {s}": {"share_prefix": share, "fused_lora": True, "cpu_kernels": s == "on"}
                for s in ("off", "on")}
    elif args.shared:
        arms = {f"share_prefix {s}": {"share_prefix": s == "on", "fused_lora": True, "cpu_kernels": True}
                for s in ("off", "on")}
    else:
        return {"update": {"share_prefix": True, "fused_lora": True, "cpu_kernels": True}}
    return arms if args.arms == "both" else {k: v for k, v in arms.items() if k.endswith(f" {args.arms}")}


def use_arm(learner: Any, spec: Any, switches: dict[str, bool]) -> None:
    """Set the learner's spec to ``switches`` and install the patches it says (``arft.cpu.patch``)."""
    from arft.cpu import patch
    from arft.trainer.learner import patched_ops

    learner.spec = spec.model_copy(update=switches)
    patch.install(learner.policy, train=True, ops=patched_ops(learner.spec))


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seqs", type=int, default=8)
    ap.add_argument("--len", type=int, default=512)
    ap.add_argument("--sampled", type=int, default=180)
    ap.add_argument("--shared", type=int, default=0, help="leading tokens each group shares (default 0)")
    ap.add_argument("--group", type=int, default=4, help="sequences per group with --shared (default 4)")
    ap.add_argument("--fused", action="store_true",
                    help="compare training.fused_lora off and on (instead of share_prefix off and on)")
    ap.add_argument("--kernels", action="store_true",
                    help="compare training.cpu_kernels off and on (the update's RMSNorm on arft's CPU kernels)")
    ap.add_argument("--arms", choices=["both", "off", "on"], default="both",
                    help="with --shared, --fused or --kernels: the switch off and on (default), or one of them alone "
                         "(its own peak RSS)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--micro", type=int, default=None, help="micro-batch size (default: the trainer's)")
    ap.add_argument("--micro-tokens", type=int, default=None,
                    help="micro-batch token budget (default: the trainer's; 0: none)")
    ap.add_argument("--checkpointing", action="store_true", help="gradient checkpointing")
    args = ap.parse_args(argv)
    if args.micro_tokens is not None and args.micro_tokens < 0:
        ap.error(f"--micro-tokens {args.micro_tokens}: give a positive budget, or 0 for none")
    if args.shared > args.len - args.sampled:
        ap.error(f"--shared {args.shared} overlaps the sampled tokens: keep it <= --len - --sampled")

    import torch

    from arft.config import TrainingSpec
    from arft.models.loading import load_model
    from arft.trainer.learner import Learner, wrap_policy

    torch.set_num_threads(args.threads)
    model, tok = load_model("smollm2-135m-instruct")
    n_params = sum(p.numel() for p in model.parameters())
    cfg = model.config
    arms = compared_arms(args)
    tokens = {} if args.micro_tokens is None else {"micro_batch_tokens": args.micro_tokens or None}
    spec = TrainingSpec(gradient_checkpointing=args.checkpointing, **tokens,
                        micro_batch_size=args.micro or TrainingSpec().micro_batch_size)
    learner = Learner(wrap_policy(model, spec, 0), spec, lr=1e-5, total_steps=100, temperature=1.0, pad_id=0)
    autocast = isinstance(learner._autocast(), torch.autocast)
    dtype = "bfloat16" if autocast else str(model.dtype).removeprefix("torch.")
    batch = make_batch(args, len(tok))
    use_arm(learner, spec, list(arms.values())[0])
    learner.update(batch)  # warm-up
    times: dict[str, list[float]] = {arm: [] for arm in arms}
    peaks = []
    faults = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(args.repeats):
        peaks.append(matmul_peak(args.threads, dtype))
        for arm, switches in arms.items():
            use_arm(learner, spec, switches)
            t = time.perf_counter()
            learner.update(batch)
            times[arm].append(time.perf_counter() - t)
    peak = statistics.median(peaks)
    # 4N per token (fwd 2N + activation-grad bwd 2N) + attention fwd+bwd (~3 x 2 * L * T * d per token)
    flops_per_token = 4 * n_params + 3 * 2 * cfg.num_hidden_layers * args.len * cfg.hidden_size
    print(f"update {args.seqs} x {args.len} tokens (loss on {args.sampled}/seq"
          f"{f', groups of {args.group} sharing {args.shared}' if args.shared else ''}), LoRA, "
          f"{'bf16 autocast' if autocast else dtype}, micro-batch {spec.micro_batch_size} / "
          f"{learner.micro_batch_tokens} tokens ({spec.micro_batch_tokens}), checkpointing "
          f"{spec.gradient_checkpointing}, {args.threads} threads, median of {args.repeats}")
    print(f"  {dtype} matmul peak (2048^2, same run): {peak:.1f} GFLOP/s")
    rates = {}
    for arm, ts in times.items():
        rates[arm] = args.seqs * args.len / statistics.median(ts)
        achieved = flops_per_token * rates[arm] / 1e9
        print(f"  {arm}: {statistics.median(ts):.2f} s = {rates[arm]:.0f} tok/s = {achieved:.1f} GFLOP/s "
              f"(model FLOPs of every token) = {achieved / peak:.2f} of peak (goal >= 0.30)")
    if len(rates) == 2:
        off, on = rates.values()
        print(f"  ratio {list(rates)[1]} / off: {on / off:.2f}x")
    usage = resource.getrusage(resource.RUSAGE_SELF)
    rss_gb = usage.ru_maxrss / 1024 ** 2
    print(f"  peak RSS: {rss_gb:.2f} GB (goal <= 6 GB)")
    updates = args.repeats * len(arms)
    print(f"  page faults {(usage.ru_minflt - faults.ru_minflt) / updates:.0f} and kernel time "
          f"{(usage.ru_stime - faults.ru_stime) / updates:.2f} s an update (after the warm-up), "
          f"peak RSS {rss_gb:.2f} GB")
    record("update_throughput", {"arms": list(arms), "tok_s": rates, "matmul_peak_gflops": peak,
                                 "of_peak": {arm: flops_per_token * r / 1e9 / peak for arm, r in rates.items()},
                                 "peak_rss_gb": rss_gb, "dtype": dtype, "seqs": args.seqs, "len": args.len,
                                 "shared": args.shared, "repeats": args.repeats})


if __name__ == "__main__":
    main()

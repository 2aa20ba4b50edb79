"""Whether torch.compile makes the fused decode step faster than the eager fused step (it did not: not used).

``torch.compile`` of the fused decode step vs the eager fused step, on the same batch state.

The issue behind the fused step asked for a compiled decode step where it measures fastest. The
eager step (``arft.engines.transformers.fused_pass``) runs its projections on oneDNN weights packed once;
inductor cannot lower that op with weights it does not own, so the compiled arm runs the same
step with ``F.linear`` under inductor's ``freezing`` (which packs the weights itself), with
dynamic shapes (the cache grows every step). Both arms decode ``--steps`` greedy steps from the
same ``--rows``-row batch (a ``--prompt``-token history, its first ``--shared`` tokens common to
all rows, read once by cascade attention), alternating, after the compiled arm's first calls
(printed: the compile time). It prints ms per step of each, the ratio, and whether both produced
the same tokens.

    python -m bench run compiled_decode
"""

from __future__ import annotations

import argparse
import copy
import time
from typing import Any, Callable, Sequence

import arft.engines.transformers.fused_pass as fused_pass
from bench.lib.harness import record

SLOW = True  # compiling the step takes ~40 s before anything is timed
QUICK = ["--rows", "4", "--prompt", "64", "--shared", "32", "--steps", "4", "--repeats", "1"]


def plain_projections(x: Any, owner: Any, layers: list[Any]) -> list[Any]:
    """``fused_pass._project`` with ``F.linear`` (what inductor can compile)."""
    import torch.nn.functional as F

    return [F.linear(x, layer.weight) for layer in layers]


def decode(step: Callable[..., Any], cache: Any, mask: Any, start: int, steps: int) -> tuple[list[float], Any]:
    """Greedy-decode ``steps`` tokens with ``step(ids, positions, mask, cache)`` from a copy of
    ``cache``: per-step seconds and the tokens ``[rows, steps]``."""
    import torch

    cache, mask = copy.deepcopy(cache), mask.clone()
    rows = mask.shape[0]
    ids, times, tokens = torch.full((rows, 1), 500), [], []
    with torch.inference_mode():
        for i in range(steps):
            mask = torch.cat([mask, mask.new_ones(rows, 1)], dim=1)
            begin = time.perf_counter()
            logits = step(ids, torch.full((rows, 1), start + i), mask, cache)
            times.append(time.perf_counter() - begin)
            ids = logits.argmax(-1, keepdim=True)
            tokens.append(ids)
    return times, torch.cat(tokens, dim=1)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=32, help="batch rows (default 32)")
    parser.add_argument("--prompt", type=int, default=400, help="history tokens a row (default 400)")
    parser.add_argument("--shared", type=int, default=250, help="leading tokens every row shares (default 250)")
    parser.add_argument("--steps", type=int, default=30, help="decode steps timed per run (default 30)")
    parser.add_argument("--repeats", type=int, default=2, help="alternating runs of each arm (default 2)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    args = parser.parse_args(argv)

    import torch
    import torch._inductor.config as inductor_config
    from transformers import DynamicCache

    from arft.cpu import patch
    from arft.engines.transformers.kv_batch import growing_layer
    from arft.engines.transformers.model_pass import ModelPass
    from arft.models.loading import load_model

    torch.set_num_threads(args.threads)
    model, _ = load_model("smollm2-135m-instruct", dtype="auto", device="cpu")
    patch.install(model, train=False)
    model_pass = ModelPass(model, on_cpu=True)
    if model_pass.fused is None:
        raise SystemExit("this model or CPU does not take the fused pass (see arft.engines.transformers.fused_pass)")
    ids = torch.randint(300, 5000, (args.rows, args.prompt), generator=torch.Generator().manual_seed(0))
    ids[:, :args.shared] = ids[0, :args.shared]
    mask = torch.ones(args.rows, args.prompt, dtype=torch.long)
    cache = DynamicCache()
    cache.layer_class_to_replicate = growing_layer()
    with torch.inference_mode():
        model_pass(ids, torch.arange(args.prompt).expand(args.rows, -1), mask, cache)

    fused = model_pass.fused

    def eager(ids: Any, positions: Any, mask: Any, cache: Any) -> Any:
        return fused.logits(ids, positions, mask, cache, args.shared)

    inductor_config.freezing = True
    inner = torch.compile(eager, dynamic=True)
    packed_projections = fused_pass._project

    def compiled(ids: Any, positions: Any, mask: Any, cache: Any) -> Any:
        fused_pass._project = plain_projections
        try:
            return inner(ids, positions, mask, cache)
        finally:
            fused_pass._project = packed_projections

    begin = time.perf_counter()
    decode(compiled, cache, mask, args.prompt, 3)
    print(f"{args.rows} rows, {args.prompt}-token history ({args.shared} shared), {args.threads} threads; "
          f"compiling and 3 first steps: {time.perf_counter() - begin:.1f} s", flush=True)
    spent = {"eager": 0.0, "compiled": 0.0}
    for rep in range(args.repeats):
        eager_times, eager_tokens = decode(eager, cache, mask, args.prompt, args.steps)
        compiled_times, compiled_tokens = decode(compiled, cache, mask, args.prompt, args.steps)
        spent["eager"] += sum(eager_times)
        spent["compiled"] += sum(compiled_times)
        print(f"  run {rep + 1}: eager {sum(eager_times) / args.steps * 1e3:.1f} ms/step, compiled "
              f"{sum(compiled_times) / args.steps * 1e3:.1f} ms/step, same tokens: "
              f"{bool(torch.equal(eager_tokens, compiled_tokens))}", flush=True)
    print(f"compiled decode step: {spent['eager'] / spent['compiled']:.2f}x the eager fused step")
    record("compiled_decode", {"compiled_vs_eager": spent["eager"] / spent["compiled"],
                               "eager_ms_per_step": spent["eager"] / (args.steps * args.repeats) * 1e3,
                               "compiled_ms_per_step": spent["compiled"] / (args.steps * args.repeats) * 1e3,
                               "rows": args.rows, "prompt": args.prompt, "steps": args.steps})


if __name__ == "__main__":
    main()

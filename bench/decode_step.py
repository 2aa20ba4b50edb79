"""arft's fused pass runs decode steps and batched prefills faster than Hugging Face's forward, same logits.

One decode step, and one batched prefill, fused (``arft.engines.transformers.fused_pass``, prefills without
their padding: ``arft.engines.transformers.ragged``) vs Hugging Face's forward, timed on the same batch state
in the middle of a real multi-turn workload.

Whole-workload timings on a shared 2-core machine swing by 15 % from run to run, more than the
change measured here. This benchmark runs ``engine_multiturn``'s workload (``bench.lib.workloads``) (32 rollouts
of three turns, the shared system prompt read once by cascade attention) through the engine
once, and at every ``--every``-th decode step times the step's forward pass both ways on the very
same rows and KV cache, alternating ``hf, fused, hf, fused`` (the cache is put back after each
pass; the real step then runs as usual). It prints the median time of each by batch size and
the ratio of the summed times. Every prefill of two rows or more (an admission of several
conversations' tool results, or of new prompts) is timed the same way, each pass on its own copy
of the plan's cache; every prefill that carries the running rows' decode step is timed as two
passes and as one.

``--holes``: the fused step that skips the masked holes of its rows' columns
(``cascade.hole_split``) against the fused step that reads them, timed the same way on the same
states (prefills are not timed).

    python -m bench run decode_step
    python -m bench run decode_step --holes
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any, Callable, Sequence

from bench.lib.harness import record
from bench.lib.workloads import Workload, run_rollouts

SLOW = True  # the whole 32-rollout workload, each timed step run three times
QUICK = ["--every", "10"]
BUCKETS = ((2, 8), (9, 16), (17, 24), (25, 32))


def step_arms(engine: Any, holes: bool) -> dict[str, Callable[[], None]]:
    """The two ways a decode step is timed, as name -> what sets the engine up for it: HF's
    forward and the fused step, or (``holes``) the fused step reading and skipping holes."""
    fused = engine._pass.fused

    def use(decoder: Any, skip: bool) -> Callable[[], None]:
        def setup() -> None:
            engine._pass.fused = decoder
            fused.skip_holes = skip
        return setup

    if holes:
        return {"fused step reading holes": use(fused, False), "fused step skipping holes": use(fused, True)}
    return {"HF forward": use(None, True), "fused step": use(fused, True)}


def timed_steps(engine: Any, every: int, arms: dict[str, Callable[[], None]]) -> dict[str, list[tuple[int, float]]]:
    """Wrap ``engine``'s decode step so every ``every``-th one (of two rows or more) is timed
    each way of ``arms`` first (alternating, twice); returns the ``(rows, seconds)`` lists it fills
    (``"split"``: the rows of the timed steps that had holes to skip)."""
    import torch

    from arft.cpu import cascade

    times: dict[str, list[tuple[int, float]]] = {name: [] for name in [*arms, "split"]}
    step = engine._decode_step
    count = [0]

    def decode_step(batch: Any) -> None:
        count[0] += 1
        if count[0] % every == 0 and batch.size >= 2:
            saved = [(layer.keys, layer.values) for layer in batch.cache.layers]
            ids = torch.tensor([[r.tokens[-1]] for r in batch.rows])
            positions = torch.tensor([[r.next_position] for r in batch.rows])
            mask = torch.cat([batch.mask, batch.mask.new_ones((batch.size, 1))], dim=1)
            if cascade.hole_split(mask, batch.shared) is not None:
                times["split"].append((batch.size, 0.0))
            for name in [*arms, *arms]:
                for layer, (k, v) in zip(batch.cache.layers, saved):
                    layer.keys, layer.values = k, v  # the appended token is forgotten
                arms[name]()
                start = time.perf_counter()
                engine._pass(ids, positions, mask, batch.cache, batch.shared)
                times[name].append((batch.size, time.perf_counter() - start))
            list(arms.values())[-1]()
            for layer, (k, v) in zip(batch.cache.layers, saved):
                layer.keys, layer.values = k, v
        step(batch)

    engine._decode_step = decode_step
    return times


def timed_prefills(engine: Any, mixed: list[tuple[int, float, float]]) -> list[tuple[tuple[int, int], float, float]]:
    """Wrap ``engine``'s prefill pass so each one of two rows or more is timed both ways first
    (``hf, fused, hf, fused``, each on a copy of the cache); returns the list of
    ``(ids shape, HF seconds, fused seconds)`` it fills. Each prefill that carries the running
    rows' decode step is also timed as two passes and as one (``ModelPass.step_and_prefill``),
    alternating, on copies of both caches: ``(running rows, two passes' seconds, one pass's)`` in
    ``mixed``."""
    import copy

    times: list[tuple[tuple[int, int], float, float]] = []
    run = engine._run

    def timed(plan: Any, along: Any = None) -> Any:
        if along is not None:
            mixed.append(time_mixed(engine, plan, along))
        if plan.ids.shape[0] >= 2:
            fused, spent = engine._pass.fused, {"hf": 0.0, "fused": 0.0}
            for name in ("hf", "fused", "hf", "fused"):
                cache = copy.deepcopy(plan.cache)
                engine._pass.fused = fused if name == "fused" else None
                start = time.perf_counter()
                engine._pass(plan.ids, plan.positions, plan.mask, cache)
                spent[name] += time.perf_counter() - start
            engine._pass.fused = fused
            times.append((tuple(plan.ids.shape), spent["hf"] / 2, spent["fused"] / 2))
        return run(plan, along)

    engine._run = timed
    return times


def time_mixed(engine: Any, plan: Any, along: Any) -> tuple[int, float, float]:
    """A decode step of ``along`` and ``plan``'s prefill, as two passes and as one (alternating,
    each on copies of both caches); ``along`` is left as it was."""
    import copy

    mask = along.mask
    step = along.step_inputs(engine.device, engine._pass.cascade)
    along.mask = mask
    spent = {"two": 0.0, "one": 0.0}
    for name in ("two", "one", "two", "one"):
        ids, positions, step_mask, cache, shared = step
        mine = (ids, positions, step_mask, copy.deepcopy(cache), shared)
        fill = (plan.ids, plan.positions, plan.mask, copy.deepcopy(plan.cache), 0)
        start = time.perf_counter()
        if name == "two":
            engine._pass(*mine)
            engine._pass(*fill)
        else:
            if not engine._pass.step_and_prefill(mine, fill)[2]:
                raise RuntimeError("the 'one pass' arm ran two passes: this prefill cannot share its pass")
        spent[name] += time.perf_counter() - start
    return along.size, spent["two"] / 2, spent["one"] / 2


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--every", type=int, default=5, help="time every N-th decode step (default 5)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--holes", action="store_true",
                        help="time the fused step skipping holes vs reading them (instead of HF vs fused)")
    args = parser.parse_args(argv)

    import torch

    from arft.engines.transformers.engine import TransformersEngine
    from arft.models.loading import load_model

    torch.set_num_threads(args.threads)
    model, tokenizer = load_model("smollm2-135m-instruct", dtype="auto", device="cpu")
    engine = TransformersEngine(model, tokenizer, max_batch_size=32)
    if engine._pass.fused is None:
        raise SystemExit("this model or CPU does not take the fused decode step (see arft.engines.transformers.fused_pass)")
    work = Workload(tokenizer, 8, 4)
    arms = step_arms(engine, args.holes)
    times = timed_steps(engine, args.every, arms)
    mixed: list[tuple[int, float, float]] = []
    prefills = [] if args.holes else timed_prefills(engine, mixed)
    tokens, seconds = asyncio.run(run_rollouts(engine, work, 64))
    print(f"model smollm2-135m-instruct {str(model.dtype).removeprefix('torch.')}, {args.threads} threads; "
          f"{tokens} tokens in {seconds:.1f} s (timed steps included)")
    base, new = arms
    for lo, hi in BUCKETS:
        a = [t for rows, t in times[base] if lo <= rows <= hi]
        b = [t for rows, t in times[new] if lo <= rows <= hi]
        if a:
            split = sum(lo <= rows <= hi for rows, _ in times["split"])
            print(f"  {lo:2d}-{hi:2d} rows: {len(a) // 2:3d} steps ({split} with holes to skip), "
                  f"{base} {statistics.median(a) * 1e3:6.1f} ms, {new} {statistics.median(b) * 1e3:6.1f} ms")
    total = {name: sum(t for _, t in times[name]) for name in arms}
    print(f"{new}: {total[base] / total[new]:.2f}x {base} (summed over the timed steps)")
    for (rows, width), hf_s, fused_s in prefills:
        print(f"  prefill of {rows:2d} rows (padded to {width:3d} new tokens): HF forward {hf_s * 1e3:6.0f} ms, "
              f"fused {fused_s * 1e3:6.0f} ms")
    if prefills:
        ratio = sum(h for _, h, _ in prefills) / sum(f for _, _, f in prefills)
        print(f"fused prefill: {ratio:.2f}x HF's forward (summed over {len(prefills)} prefills of 2 rows or more)")
    result: dict[str, Any] = {"arms": list(arms), "step_ratio": total[base] / total[new],
                              "dtype": str(model.dtype).removeprefix("torch."), "every": args.every}
    if prefills:
        result["prefill_ratio"] = ratio
    if mixed:
        two, one = sum(t for _, t, _ in mixed), sum(o for _, _, o in mixed)
        print(f"decode step in the prefill's pass: {two / one:.2f}x two passes ({len(mixed)} admissions next to "
              f"{statistics.median(r for r, _, _ in mixed):.0f} running rows (median): {two:.1f} -> {one:.1f} s)")
        result["step_in_prefill_ratio"] = two / one
    record("decode_step" + ("_holes" if args.holes else ""), result)


if __name__ == "__main__":
    main()

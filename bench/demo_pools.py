"""The demo trains faster with one OpenMP pool alive at a time, arft's fused pass and its update kernels.

``make demo`` with one OpenMP pool alive at a time (``arft.cpu.threads``, the default) vs every
thread keeping its own (``ARFT_OPENMP_POOLS=keep``, how torch behaves by itself), in one command;
``--compare fused``: with the engine's fused pass (``engine.fused_pass``, the default) vs Hugging
Face's forward (on a bf16 CPU the demo's rollouts sample through the LoRA adapter, which the
fused pass runs since ``arft.cpu.lora_products``); ``--compare kernels``: the update on arft's
CPU kernels (``training.cpu_kernels``, the default) vs PyTorch's operations.

Each arm runs ``arft train examples/calculator/job.yaml`` as its own process (the demo: 10 RL
steps, evals at steps 0, 5 and 10), the arms taking turns for ``--repeats`` rounds. Printed per
run: the wall time of the whole process (model loading included) and the eval reward at each
eval step; then the median wall time of each arm and their ratio.

    python -m bench run demo_pools --repeats 2
    python -m bench run demo_pools --compare fused --repeats 2
    python -m bench run demo_pools --compare kernels --repeats 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from bench.lib.harness import ROOT, record

SLOW = True  # whole `arft train` runs of the demo, minutes each
QUICK = ["--repeats", "1"]
JOB = ROOT / "examples" / "calculator" / "job.yaml"
COMPARISONS: dict[str, dict[str, tuple[dict[str, str], dict[str, Any]]]] = {
    "pools": {"one pool": ({}, {}), "pools kept": ({"ARFT_OPENMP_POOLS": "keep"}, {})},
    "fused": {"fused pass": ({}, {}), "HF forward": ({}, {"engine": {"fused_pass": False}})},
    "kernels": {"CPU kernels": ({}, {}), "PyTorch's update": ({}, {"training": {"cpu_kernels": False}})},
}
"""Each comparison's arms: name -> (environment, job overrides by section), the default first."""


def eval_rewards(run_dir: Path) -> dict[int, float]:
    """``{step: eval reward}`` from the run's ``metrics.jsonl``."""
    rewards = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        for key, value in row.items():
            if key.startswith("eval/") and key.endswith("reward_mean"):
                rewards[int(row["step"])] = float(value)
    return rewards


def run_demo(env: dict[str, str], overrides: dict[str, Any], out: Path) -> tuple[float, dict[int, float]]:
    """Seconds for one ``arft train`` of the demo job (its sections updated with ``overrides``),
    and its eval rewards."""
    import yaml

    arft = Path(sys.executable).parent / "arft"
    job = JOB
    if overrides:  # a copy beside the job, so that its relative paths still resolve
        spec = yaml.safe_load(JOB.read_text())
        for section, values in overrides.items():
            spec[section] = {**(spec.get(section) or {}), **values}
        job = JOB.with_name(f".demo-{out.name}.yaml")
        job.write_text(yaml.safe_dump(spec))
    try:
        start = time.perf_counter()
        subprocess.run([str(arft), "train", str(job), "--out", str(out)], check=True, cwd=ROOT,
                       env={**os.environ, **env}, stdout=subprocess.DEVNULL)
        return time.perf_counter() - start, eval_rewards(out)
    finally:
        if job != JOB:
            job.unlink()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2, help="rounds of both arms (default 2)")
    parser.add_argument("--compare", choices=list(COMPARISONS), default="pools",
                        help="pools: one OpenMP pool vs pools kept (default); "
                             "fused: the engine's fused pass vs HF's forward; "
                             "kernels: the update on arft's CPU kernels vs PyTorch's")
    args = parser.parse_args(argv)
    arms = COMPARISONS[args.compare]
    times: dict[str, list[float]] = {arm: [] for arm in arms}
    with tempfile.TemporaryDirectory(prefix="demo-pools-") as tmp:
        for rep in range(args.repeats):
            for arm, (env, overrides) in arms.items():
                name = "".join(c if c.isalnum() else "-" for c in arm)
                seconds, rewards = run_demo(env, overrides, Path(tmp) / f"{name}-{rep}")
                times[arm].append(seconds)
                shown = " / ".join(f"{rewards[s]:.2f}" for s in sorted(rewards))
                print(f"  run {rep + 1} {arm:>16}: {seconds:6.1f} s, eval reward at steps "
                      f"{sorted(rewards)}: {shown}", flush=True)
    med = {arm: statistics.median(t) for arm, t in times.items()}
    print("median wall time: " + " | ".join(f"{arm} {s:.1f} s" for arm, s in med.items()))
    default, other = arms
    print(f"{other} / {default} (wall time): {med[other] / med[default]:.2f}x")
    record("demo_pools" + ("" if args.compare == "pools" else f"_{args.compare}"),
           {"compare": args.compare, "wall_s": times, "median_s": med, "ratio": med[other] / med[default]})


if __name__ == "__main__":
    main()

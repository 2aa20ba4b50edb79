"""Live monitors flag seeded failures within 3 steps of their onset and stay quiet on the demo.

Real training runs of the calculator example (the embedded model, ``examples/calculator/job.yaml``)
with its default monitors, one case after the other, each a plain ``--set`` of the demo job:

1. ``demo``: the job as it is (10 steps): the goal is no alarm;
2. ``length``: a grader that pays for length (a python grader: answer characters / 200, capped at 1);
3. ``dominance``: a ``multi`` grader whose noisy ``style`` sub-grader carries the reward's variance
   (``0.1 * answer + style``, style a hash-like function of the answer's length);
4. ``lr``: a learning rate 100x the demo's (0.05): one update breaks the policy (entropy collapse).

Each seeded failure is in place from step 1 (its onset); flagged means any monitor raised an
alarm, and the one expected for it is named. Printed: per case the alarms with the step each fired
at. Results: ``bench/results/monitors.json``.

    python -m bench run monitors [--cases demo,length,dominance,lr] [--steps S] [--eval-tasks N]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import time
from typing import Any, Sequence

from bench.lib.harness import OUT, ROOT, log, record

SLOW = True  # up to four training runs of the embedded model
QUICK = ["--cases", "lr", "--steps", "3", "--eval-tasks", "2"]

JOB = ROOT / "examples" / "calculator" / "job.yaml"
ONSET = 1
"""The step at which every seeded failure starts: it is in the job from the first step."""
WITHIN = 3
"""The goal: an alarm at most this many steps after the onset."""

LENGTH_GRADER = ('method.reinforcement.grader={type: python, name: length_pay, source: "def grade(sample, item):\\n'
                 '    return min(1.0, len(sample[\\"output_text\\"]) / 200)\\n"}')
DOMINANCE_GRADER = (
    'method.reinforcement.grader={type: multi, name: answer_and_style, graders: {answer: {type: string_check, '
    'name: answer, input: "{{ sample.output_text }}", reference: "{{ item.answer }}", operation: like}, '
    'style: {type: python, name: style, source: "def grade(sample, item):\\n    return '
    '(len(sample[\\"output_text\\"]) * 37 % 11) / 10\\n"}}, calculate_output: "0.1 * answer + style"}')

CASES: dict[str, tuple[list[str], set[str] | None]] = {
    "demo": ([], None),
    "length": ([LENGTH_GRADER], {"length_drift"}),
    "dominance": ([DOMINANCE_GRADER], {"sub_grader_dominance"}),
    "lr": (["training.learning_rate=0.05"], {"entropy_collapse"}),
}
"""Case -> (its --set overrides of the demo job, the monitors expected to flag it; None: no alarm)."""


def job_of(case: str, args: argparse.Namespace) -> tuple[Any, list[str]]:
    from arft.config import load_job

    sets = list(CASES[case][0])
    if case != "demo" and args.steps:
        sets.append(f"training.max_steps={args.steps}")
    if case != "demo" and args.eval_tasks:
        sets.append(f"training.eval_tasks={args.eval_tasks}")
    return load_job(JOB, sets), sets


async def run_case(case: str, args: argparse.Namespace) -> dict[str, Any]:
    from arft.app.session import Hooks
    from arft.app.train import train
    from arft.monitors import Alarm

    job, sets = job_of(case, args)
    run_dir = OUT / "monitors" / case
    if run_dir.exists():
        shutil.rmtree(run_dir)
    steps: dict[int, dict[str, float]] = {}

    def step_done(step: int, m: dict[str, float]) -> None:
        steps[step] = {k: v for k, v in m.items() if k.startswith("monitor/") or k in (
            "train/reward_mean", "update/entropy", "train/tool_calls_mean", "time/step_s")}
        log(f"  {case} step {step}: reward {m.get('train/reward_mean', float('nan')):.3f}, "
            f"{m.get('time/step_s', 0):.0f} s")

    def alarm(a: Alarm) -> None:
        log(f"  {case} ALARM {a.monitor} at step {a.step}: {a.message}")

    t0 = time.perf_counter()
    result = await train(job, run_dir, hooks=Hooks(step_done=step_done, alarm=alarm,
                                                   status=lambda s: log(f"  {s}")))
    alarms = [{"monitor": a.monitor, "step": a.step, "message": a.message} for a in result.alarms]
    return {"sets": sets, "steps": job.training.max_steps, "wall_s": time.perf_counter() - t0,
            "alarms": alarms, "per_step": steps,
            "evals": {s: e.reward.mean for s, e in sorted(result.evals.items())}}


def judged(case: str, res: dict[str, Any]) -> dict[str, Any]:
    """First alarm (any monitor, and the expected one), and whether the case meets its goal."""
    expected = CASES[case][1]
    first = min((a["step"] for a in res["alarms"]), default=None)
    first_expected = min((a["step"] for a in res["alarms"] if expected and a["monitor"] in expected), default=None)
    ok = not res["alarms"] if expected is None else (first is not None and first - ONSET <= WITHIN)
    return {"first_alarm_step": first, "first_expected_step": first_expected, "goal_met": ok}


def table(results: dict[str, Any]) -> str:
    rows = ["| case | seeded failure | alarms (monitor @ step) | first alarm | goal |", "|---|---|---|---|---|"]
    what = {"demo": "none (demo defaults, 10 steps)", "length": "grader pays for length",
            "dominance": "noisy sub-grader dominates", "lr": "learning rate 100x (entropy collapse)"}
    for case, r in results.items():
        alarms = ", ".join(f"{a['monitor']} @ {a['step']}" for a in r["alarms"]) or "none"
        goal = "no alarm" if CASES[case][1] is None else f"<= step {ONSET + WITHIN}"
        rows.append(f"| {case} | {what[case]} | {alarms} | {r['first_alarm_step'] or '-'} | {goal}: "
                    f"{'met' if r['goal_met'] else 'MISSED'} |")
    return "\n".join(rows)


def verdict(results: dict[str, Any]) -> str:
    parts = []
    for case, r in results.items():
        if CASES[case][1] is None:
            parts.append(f"{case}: {'no alarm' if not r['alarms'] else str(len(r['alarms'])) + ' alarms (goal: none)'}")
        else:
            parts.append(f"{case}: first alarm at step {r['first_alarm_step']} (goal <= {ONSET + WITHIN})")
    return "; ".join(parts)


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", default="demo,length,dominance,lr")
    p.add_argument("--steps", type=int, default=5, help="training.max_steps of the seeded cases (the demo runs 10)")
    p.add_argument("--eval-tasks", type=int, default=2, help="validation tasks evaluated in the seeded cases")
    args = p.parse_args(argv)
    results: dict[str, Any] = {}
    for case in args.cases.split(","):
        if case not in CASES:
            raise SystemExit(f"unknown case {case!r}: use {', '.join(CASES)}")
        log(f"case {case}")
        res = asyncio.run(run_case(case, args))
        results[case] = {**res, **judged(case, res)}
        command = "python -m bench run monitors " + " ".join(sys.argv[3:] if argv is None else argv)
        record("monitors", {"verdict": verdict(results), "command": command.strip(), "cases": results})  # so far
    print()
    print(table(results))
    print()
    print(verdict(results))


if __name__ == "__main__":
    main()

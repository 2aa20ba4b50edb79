"""Privileged hints rescue zero-signal groups: RL with hints beats RL alone on plain rows (goal +30 points).

RL alone against RL with ``training.rescue`` (each rung and correction), side by side in one
command, on the same job, seed, training order and held-out tasks, with no teacher and no
demonstrations.

    python -m bench run rescue [ENV] [--steps S] [--arms rl,tis,none,explore,both] [--tasks N]
        [--samples K] [--groups equal|unsolved] [--unhinted train|baseline] [--hint TEMPLATE]
        [--set SECTION.FIELD=VALUE] [--repeats R] [--explore-temperature T]

ENV (default ``finance_lookup``) is a folder under ``examples/`` with a ``job_plain.yaml`` (rows
as real traffic has them) and a hint in ``HINTS`` (a template over the row: the expected call).
Arms, one after the other:

1. ``rl``: ``arft train`` as the job says;
2. ``tis``: the same with ``training.rescue`` (the hinted samples importance-weighted);
3. ``none``: the same with ``correction: none`` (hinted samples as if sampled by the policy);
4. ``explore``: the exploration rung alone (``explore_temperature``: near-identical stuck groups
   sampled again, hotter, without a hint);
5. ``both``: the exploration rung, then hints (``tis``) for the groups still stuck.

Printed: eval reward at the untrained baseline and after each arm, per step; rescued groups (and
which rung rescued them) and the hinted share of the trained sequences per step; each arm's wall
time. With ``--repeats R``, every arm runs on R seeds (the job's, then the next ones; both arms
on one seed before the next seed) and the verdict is the mean gain over RL alone, each seed's
listed: one run is noisy (finance_lookup's gain was +31 on one run and +5 on the next, same
seed). Results: ``bench/results/rescue_<ENV>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from bench.lib.case_runs import EXAMPLES, evals_of, extra_metrics
from bench.lib.harness import OUT, ROOT, log, record

SLOW = True  # up to five training runs of an example
QUICK = ["calculator", "--steps", "1", "--tasks", "2", "--arms", "rl,both"]

HINTS = {
    # The expected call, as the row knows it (``query``: the search an expert runs, in the question's
    # own words), not the answer: told the answer, the 135M model mostly writes it without looking
    # (a success that teaches guessing once the hint is gone). Told the call, the untrained policy
    # succeeds in 26 of 64 samples (12 of 16 tasks); with a query built from ``item.kind``
    # ("net_income": words the question never says) in 17 of 64 (9 of 16).
    "finance_lookup": 'Call search with {"query": "{{ item.query }}"}, then reply with the figure it shows.',
    # The same kind of hint: the search an expert makes, which the row carries (``query``, as
    # make_data.py's worked examples search). Built from the row's service and kind instead, the
    # query found nothing for a function's question ("function" is a stop word): 14 of 64 samples
    # succeeded either way, but only the row's query taught searches that work without the hint
    # (eval 0.17 against 0.56 after 10 steps, docs/training.md).
    "code_qa": 'Call search with {"query": "{{ item.query }}"}, then answer with the exact values it shows.',
    "calculator": 'Call calculator with {"expression": "{{ item.expression }}"}, then state the result.',
}
# Issue 37's goal per example: a lift where RL alone stalls; where RL already learns (the
# calculator), hints must not hurt.
GOALS = {"finance_lookup": "goal +30", "code_qa": "goal +30", "calculator": "goal: not below RL alone"}


def job_of(env: str, arm: str, args: argparse.Namespace) -> Any:
    from arft.config import load_job
    from arft.config.sections import RescueSpec

    env_dir = ROOT / "examples" / env
    job = load_job(env_dir / ("job_plain.yaml" if (env_dir / "job_plain.yaml").exists() else "job.yaml"), args.set)
    training: dict[str, Any] = {}
    if args.steps:
        training["max_steps"] = args.steps
    hint, common = args.hint or HINTS[env], {"samples": args.samples, "groups": args.groups,
                                             "unhinted": args.unhinted}
    if arm in ("tis", "none"):
        training["rescue"] = RescueSpec(hint=hint, correction=arm, **common)  # type: ignore[arg-type]
    elif arm == "explore":
        training["rescue"] = RescueSpec(explore_temperature=args.explore_temperature, **common)
    elif arm == "both":
        training["rescue"] = RescueSpec(hint=hint, explore_temperature=args.explore_temperature, **common)
    elif arm != "rl":
        raise SystemExit(f"unknown arm {arm!r}: use rl, tis, none, explore or both")
    if args.tasks:
        training["eval_tasks"] = args.tasks
    return job.model_copy(update={"training": job.training.model_copy(update=training)})


def hooks(steps: dict[int, dict[str, float]]) -> Any:
    from arft.app.session import Hooks
    from arft.report.summary import summary_line

    def step_done(step: int, m: dict[str, float]) -> None:
        steps[step] = {k: m[k] for k in ("train/task_reward_mean", "train/groups_dropped", "train/groups",
                                         "train/groups_rescued", "train/groups_explored", "train/hinted_share",
                                         "train/explored_share", "time/step_s") if k in m}
        log(f"  step {step}: {m.get('time/step_s', 0):.0f} s, train reward {m.get('train/task_reward_mean', 0):.3f}, "
            f"dropped {m.get('train/groups_dropped', 0):.0f}/{m.get('train/groups', 0):.0f}, rescued "
            f"{m.get('train/groups_rescued', 0):.0f} ({m.get('train/groups_explored', 0):.0f} by exploring), "
            f"hinted {100 * m.get('train/hinted_share', 0):.0f}%")

    return Hooks(status=lambda s: log(f"  {s}"), step_done=step_done,
                 eval_done=lambda step, s: log(f"  eval @ step {step}: {summary_line(s)}"))


async def arm(job: Any, run_dir: Path) -> dict[str, Any]:
    from arft.app.train import train

    if run_dir.exists():
        shutil.rmtree(run_dir)
    steps: dict[int, dict[str, float]] = {}
    t0 = time.perf_counter()
    await train(job, run_dir, hooks=hooks(steps))
    return {"wall_s": time.perf_counter() - t0, "steps": steps}


def last_eval(a: dict[str, Any]) -> dict[str, Any]:
    """An arm's eval after its last step (JSON keys are str)."""
    return a["evals"][max(a["evals"], key=int)]


def final(a: dict[str, Any]) -> float:
    """An arm's eval reward after its last step."""
    return float(last_eval(a)["reward"])


def total(a: dict[str, Any], metric: str) -> int:
    """A count summed over an arm's steps (``train/groups_rescued``: by either rung)."""
    return round(sum(s.get(metric, 0) for s in a["steps"].values()))


def first_arms(res: dict[str, Any]) -> dict[str, Any]:
    """The arms of the first seed (the job's own), which the per-step tables show."""
    return res["repeats"][0]["arms"]


def verdict(res: dict[str, Any]) -> str:
    """The first seed's figures per arm, then the best rescue arm's gain over RL alone: averaged
    over the seeds when the run repeated both arms (``--repeats``), each seed's gain listed."""
    repeats, arms = res["repeats"], first_arms(res)
    rl = arms.get("rl")
    if rl is None:
        return "no RL-alone arm: no comparison"
    base = rl["evals"][min(rl["evals"], key=int)]["reward"]
    seed = f" (seed {repeats[0]['seed']})" if len(repeats) > 1 else ""
    parts = [f"{res['env']}{seed}: eval reward {base:.2f} untrained"]
    for name, a in arms.items():
        last = final(a)
        parts.append(f"{name} {last:.2f} ({100 * (last - base):+.0f} pts"
                     + (f", {total(a, 'train/groups_rescued')} groups rescued, "
                        f"{total(a, 'train/groups_explored')} of them by exploring"
                        if name != "rl" else "") + ")")
    gains = {n: [final(r["arms"][n]) - final(r["arms"]["rl"]) for r in repeats] for n in arms if n != "rl"}
    best = max(gains, key=lambda n: sum(gains[n]), default=None)
    goal = GOALS.get(res["env"], "goal +30")
    if best is not None:
        mean = 100 * sum(gains[best]) / len(gains[best])
        if len(repeats) > 1:
            each = ", ".join(f"{100 * g:+.0f} (seed {r['seed']})" for g, r in zip(gains[best], repeats))
            parts.append(f"rescue - RL alone: {mean:+.0f} pts on average over {len(repeats)} seeds "
                         f"({best}; {each}; {goal})")
        else:
            parts.append(f"rescue - RL alone: {mean:+.0f} pts ({best}; {goal})")
    return "; ".join(parts)


def repeat_table(res: dict[str, Any]) -> str:
    """Per seed (``--repeats``), each arm's eval reward after its last step (a rescue arm's with the
    groups it rescued: with none, the arm trained as RL alone did, and any difference is the
    runs' own noise); empty for one seed."""
    repeats = res["repeats"]
    if len(repeats) < 2:
        return ""
    names = list(first_arms(res))
    rows = ["| seed | " + " | ".join(names) + " |", "|---" * (1 + len(names)) + "|"]
    rows += [f"| {r['seed']} | " + " | ".join(f"{final(r['arms'][n]):.3f}"
                                             + ("" if n == "rl" else f" ({total(r['arms'][n], 'train/groups_rescued')} rescued)")
                                             for n in names) + " |" for r in repeats]
    mean = [sum(final(r["arms"][n]) for r in repeats) / len(repeats) for n in names]
    return "\n".join(rows + ["| mean | " + " | ".join(f"{m:.3f}" for m in mean) + " |"])


def table(res: dict[str, Any]) -> str:
    """Per arm (the first seed's), the eval reward at each evaluated step and the arm's wall time."""
    arms = first_arms(res)
    steps = sorted({int(s) for a in arms.values() for s in a["evals"]})  # JSON keys are str
    rows = ["| arm | " + " | ".join(f"eval @ {s}" for s in steps) + " | wall |", "|---" * (2 + len(steps)) + "|"]
    for name, a in arms.items():
        evs = {int(k): v["reward"] for k, v in a["evals"].items()}
        cells = [f"{evs[s]:.3f}" if s in evs else "" for s in steps]
        rows.append(f"| {name} | " + " | ".join(cells) + f" | {a['wall_s'] / 60:.1f} min |")
    return "\n".join(rows)


def step_table(res: dict[str, Any]) -> str:
    """Per training step and rescue arm: the groups rescued (of the step's groups), the groups
    still dropped, and the hinted share of the trained sequences."""
    per_step = {n: {int(k): m for k, m in a["steps"].items()} for n, a in first_arms(res).items()}  # JSON keys are str
    arms = [n for n in per_step if n != "rl"]
    steps = sorted({s for m in per_step.values() for s in m})
    rows = ["| step | " + " | ".join(f"{n}: rescued / dropped / hinted" for n in arms)
            + (" | rl: dropped |" if "rl" in per_step else " |"),
            "|---" * (1 + len(arms) + ("rl" in per_step)) + "|"]
    for step in steps:
        cells = []
        for n in arms:
            m = per_step[n].get(step, {})
            cells.append(f"{m.get('train/groups_rescued', 0):.0f} / {m.get('train/groups_dropped', 0):.0f} of "
                         f"{m.get('train/groups', 0):.0f} / {100 * m.get('train/hinted_share', 0):.0f} %")
        if "rl" in per_step:
            m = per_step["rl"].get(step, {})
            cells.append(f"{m.get('train/groups_dropped', 0):.0f} of {m.get('train/groups', 0):.0f}")
        rows.append(f"| {step} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def extra_table(res: dict[str, Any]) -> str:
    """Per arm, the example's own figures (its ``bench_metrics.py``) on the last eval: what the
    reward alone does not tell, such as answers that paste raw tool output. Empty without them."""
    last = {n: last_eval(a).get("extra") or {} for n, a in first_arms(res).items()}
    names = list(dict.fromkeys(k for extra in last.values() for k in extra))
    if not names:
        return ""
    rows = ["| arm | " + " | ".join(names) + " |", "|---" * (1 + len(names)) + "|"]
    rows += [f"| {n} | " + " | ".join(f"{extra[k]:.2f}" if k in extra else "" for k in names) + " |"
             for n, extra in last.items()]
    return "\n".join(rows)


def summary(res: dict[str, Any]) -> str:
    """The page's text for one run: the verdict, eval reward per arm and step, rescue per step,
    and the example's own figures on the last eval."""
    repeats, extra = repeat_table(res), extra_table(res)
    seed = f" (seed {res['repeats'][0]['seed']}, the first)" if repeats else ""
    parts = [f"{verdict(res)}.", f"Hint: `{res['hint']}`; a rescued group's own rollouts: "
             f"{res['unhinted']} (`training.rescue.unhinted`).", f"Eval reward (no hints) per arm{seed}:",
             table(res), "Rescue per training step:", step_table(res)]
    if repeats:
        parts += ["Eval reward after the last step, per seed (both arms on each seed, one after the other):", repeats]
    return "\n\n".join(parts + ([f"The example's own figures on the last eval{seed}:", extra] if extra else []))


def positive(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("env", nargs="?", default="finance_lookup", choices=sorted(HINTS))
    p.add_argument("--steps", type=int, help="override training.max_steps")
    p.add_argument("--tasks", type=int, help="evaluate on the first N validation tasks only")
    p.add_argument("--arms", default="rl,tis,none,explore,both")
    p.add_argument("--hint", help="the hint template (default: the example's entry in HINTS)")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                   help="override a field of the job, for every arm (as arft train --set)")
    p.add_argument("--groups", default="equal", choices=["equal", "unsolved"],
                   help="which groups are stuck (training.rescue.groups)")
    p.add_argument("--samples", type=int, help="rollouts sampled again per stuck group (default: the group size)")
    p.add_argument("--unhinted", default="baseline", choices=["baseline", "train"],
                   help="whether a rescued group's own rollouts train or only set the baseline "
                        "(training.rescue.unhinted)")
    p.add_argument("--repeats", type=positive, default=1,
                   help="run every arm on this many seeds (the job's, then the next ones); the verdict "
                        "is the mean gain (one run of a 135M model is noisy: +5 to +31 points on one seed)")
    p.add_argument("--explore-temperature", type=float, default=1.5,
                   help="the exploration rung's sampling temperature (arms explore and both)")
    args = p.parse_args(argv)
    out = OUT / f"rescue_{args.env}"
    env_dir = ROOT / "examples" / args.env
    res: dict[str, Any] = {"env": args.env, "hint": args.hint or HINTS[args.env], "unhinted": args.unhinted,
                           "repeats": [],
                           "command": "python -m bench run rescue " + " ".join(sys.argv[1:] if argv is None else argv)}
    with EXAMPLES.services(env_dir):
        for k in range(args.repeats):
            arms: dict[str, Any] = {}
            for name in args.arms.split(","):
                job = job_of(args.env, name, args)
                job = job.model_copy(update={"seed": job.seed + k})  # the job's own seed first
                log(f"{args.env}: arm {name}" + (f", seed {job.seed} ({k + 1} of {args.repeats})"
                                                  if args.repeats > 1 else ""))
                run_dir = out / (name if k == 0 else f"{name}_seed{job.seed}")
                info = asyncio.run(arm(job, run_dir))
                arms[name] = {**info, "evals": evals_of(run_dir, extra_metrics(env_dir))}
            res["repeats"].append({"seed": job.seed, "arms": arms})
    record(f"rescue_{args.env}", {"verdict": verdict(res), "summary": summary(res), **res})
    print()
    print(summary(res))


if __name__ == "__main__":
    main()

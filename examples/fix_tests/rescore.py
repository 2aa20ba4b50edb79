"""Re-score a fix_tests run's stored eval rollouts with the grader as job.yaml has it now
(its ``calculate_output``, read from the job).

    python examples/fix_tests/rescore.py bench/out/case_fix_tests-run1/run/arft.sqlite

Earlier runs were graded before the ``answered`` (run 1) and ``honest`` (runs 1–3) children
existed. ``tests``, ``style`` and ``verified`` are the stored sub-scores (their graders did not
change); ``answered`` (the reply is not empty) and ``honest`` (``grader.py``: the reply does not
contradict the last test run) are computed on the stored trajectory as the grader sees it.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]  # the example's grader.py, then arft

import grader  # noqa: E402 - examples/fix_tests/grader.py
from arft.config import load_job  # noqa: E402
from arft.graders.base import build_sample  # noqa: E402
from arft.graders.formula import parse_formula  # noqa: E402
from arft.tracing.store import RunStore  # noqa: E402


def main(path: str) -> None:
    formula = parse_formula(load_job(HERE / "job.yaml").rl.grader_dict["calculate_output"])
    with RunStore(path) as store:
        for run in store.runs():
            if run["kind"] != "eval":
                continue
            rollouts = store.rollouts(run["run_id"])
            new, old, answered, dishonest = [], [], 0, 0
            for r in rollouts:
                sub, sample = r.score.sub_scores, build_sample(r)
                ans = 1.0 if sample["output_text"] != "" else 0.0
                honest = grader.grade(sample, {})
                answered += int(ans)
                dishonest += int(sub["tests"] == 1.0 and ans and not honest)
                new.append(formula.evaluate({**sub, "answered": ans, "honest": honest}))
                old.append(r.score.score)
            n = len(rollouts)
            print(f"{run['run_id']}: n={n} stored reward {sum(old) / n:.3f} -> current grader "
                  f"{sum(new) / n:.3f}; answered {answered}/{n}, fixed but dishonest reply {dishonest}/{n}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])

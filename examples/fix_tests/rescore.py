"""Re-score run 1's stored eval rollouts with the fixed formula (answered child added).

tests, style and verified are the stored sub-scores; answered is the string_check the job now
has (output_text != ""), computed on the stored trajectory as the grader would see it.
"""
import sys
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2]))
from arft.graders.base import build_sample
from arft.tracing.store import RunStore

with RunStore(sys.argv[1]) as s:
    for run in s.runs():
        if run["kind"] != "eval":
            continue
        rs = s.rollouts(run["run_id"])
        new, old = [], []
        for r in rs:
            sub = r.score.sub_scores
            answered = 1.0 if build_sample(r)["output_text"] != "" else 0.0
            new.append(sub["tests"] * (0.7 * sub["style"] * answered + 0.3 * sub["verified"]))
            old.append(r.score.score)
        n = len(rs)
        print(f"{run['run_id']}: n={n} stored reward {sum(old)/n:.3f} -> fixed formula {sum(new)/n:.3f}, "
              f"answered {sum(1 for r in rs if build_sample(r)['output_text'] != '')}/{n}")

"""`arft doctor RUN_DIR`: was every rollout of a training run sampled by the weights its step says?

Every stored rollout records the ``PolicyStamp`` of the weights that sampled its last turn (the
training step they come from and their content hash, docs/weights.md). A run is consistent when:

* a training rollout of step ``k`` was sampled by the weights after step ``k - 1`` (with
  ``training.max_off_policy_steps = b``, by those of any step from ``k - 1 - b`` to ``k - 1``), and
  an evaluation at step ``k`` by the weights after step ``k``. A step whose batch taught nothing
  (``update/tokens`` 0) made no new weights: its rollouts' stamps keep the step before's;
* one version of the weights has one hash (two hashes for one step: one copy did not sync);
* a checkpoint's weights hash to what the rollouts of its step's weights record.

The trainer already stops a run whose engine did not take a sync (``arft.app.policy``); this
check reads a finished run, e.g. one trained against an external vLLM server or by an older arft.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from arft.app.doctor.checks import Check, DoctorReport, _check, _more
from arft.records import Rollout
from arft.tracing.run_dir import RunDir, checkpoint_step

TRAIN_RUN = "train"
"""The store id of a training run's rollouts (its evaluations: ``train:eval-NNNNNN``)."""


@dataclass(frozen=True)
class Versions:
    """The weight versions a run made: 0 (where it started) and every step that updated them."""

    made: frozenset[int]
    bound: int
    """``training.max_off_policy_steps``: how many versions behind a training rollout may be."""

    def latest(self, step: int) -> int:
        """The newest version made at or before ``step``."""
        return max((v for v in self.made if v <= step), default=0)

    def allowed(self, rollout: Rollout, evaluation: bool) -> tuple[int, int]:
        """The oldest and newest version that may have sampled ``rollout``."""
        step = rollout.step or 0
        if evaluation:
            return self.latest(step), self.latest(step)
        return self.latest(max(step - 1 - self.bound, 0)), self.latest(step - 1)


def doctor_run(run_dir: Path) -> DoctorReport:
    """The run checks of a training run directory (``arft doctor RUN_DIR``)."""
    from arft.trainer.merge import run_job

    bound = run_job(run_dir).training.max_off_policy_steps
    with RunDir(run_dir).open_store() as store:
        metrics = store.metrics(TRAIN_RUN)
        rollouts = store.rollouts()
    made = frozenset({0} | {int(m["step"]) for m in metrics if m["name"] == "update/tokens" and m["value"] > 0})
    train = [r for r in rollouts if r.run_id == TRAIN_RUN]
    evals = [r for r in rollouts if r.run_id.startswith(f"{TRAIN_RUN}:eval-")]
    seen = {r.policy.version for r in rollouts if r.policy is not None}
    check = check_policy_stamps(train, evals, Versions(made, bound), checkpoint_hashes(run_dir, seen))
    return DoctorReport(job=str(run_dir), checks=[check])


def checkpoint_hashes(run_dir: Path, versions: set[int]) -> dict[int, str]:
    """The weights hash of each complete checkpoint of a step in ``versions``."""
    from safetensors.torch import load_file

    from arft.models.weights_hash import weights_hash

    found = {}
    for path in RunDir(run_dir).complete_checkpoints():
        step = checkpoint_step(path)
        if step in versions:
            found[step] = weights_hash(load_file(str(path / "trainable.safetensors")))
    return found


def check_policy_stamps(train: Sequence[Rollout], evals: Sequence[Rollout], versions: Versions,
                        checkpoints: Mapping[int, str]) -> Check:
    """The ``run.policy`` verdict over a run's training and evaluation rollouts (module docstring)."""
    stamped = [(r, False) for r in train if r.policy] + [(r, True) for r in evals if r.policy]
    if not stamped:
        return _check("run.policy", verdict="skip", measured="no rollout records the weights that sampled it "
                      "(a run from before policy stamps, or an engine that cannot say)")
    wrong: list[str] = []
    hashes: dict[int, set[str]] = defaultdict(set)
    for r, evaluation in stamped:
        assert r.policy is not None
        hashes[r.policy.version].add(r.policy.hash)
        low, high = versions.allowed(r, evaluation)
        if not low <= r.policy.version <= high:
            want = f"step {high}'s" if low == high else f"those of steps {low}-{high}"
            wrong.append(f"{'eval' if evaluation else 'train'} rollout {r.trace_id} of step {r.step}: sampled by "
                         f"step {r.policy.version}'s weights ({r.policy.hash}), expected {want}")
    wrong += [f"step {v}'s weights appear with {len(hs)} hashes: {', '.join(sorted(hs))} (a copy that did "
              "not sync)" for v, hs in sorted(hashes.items()) if len(hs) > 1]
    wrong += [f"checkpoint step-{v:06d} holds weights {h}, but rollouts of step {v}'s weights record "
              f"{', '.join(sorted(hashes[v]))}" for v, h in sorted(checkpoints.items()) if h not in hashes[v]]
    unstamped = len(train) + len(evals) - len(stamped)
    measured = (f"{len(stamped)} rollouts over {len(hashes)} weight versions"
                + (f" ({unstamped} record no stamp)" if unstamped else "")
                + (f"; {len(checkpoints)} checkpoints hashed" if checkpoints else ""))
    if not wrong:
        return _check("run.policy", verdict="pass", measured=measured + ": each sampled by the weights its step says")
    return _check("run.policy", verdict="fail", measured=f"{measured}: {len(wrong)} inconsistencies",
                  details=_more(wrong),
                  threshold="train rollouts of step k: the weights after step k-1 (max_off_policy_steps "
                            "older at most); evals of step k: after step k; one hash per version",
                  advice="the engine sampled from other weights than the trainer trained: its rollouts do "
                         "not train the policy they claim. Check the engine's weight sync (vLLM: "
                         "RUN_DIR/vllm.log), then train again from the last good checkpoint (docs/weights.md)")

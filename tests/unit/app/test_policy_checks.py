"""The `arft doctor RUN_DIR` rule on stamped rollouts: which weights may have sampled a rollout of a
step (async rollouts' window, steps that made no new weights, evaluations), one hash per version,
checkpoints that hash to their step's stamp."""

from __future__ import annotations

from arft.app.doctor.policy_checks import Versions, check_policy_stamps
from arft.records import Message, PolicyStamp, Rollout

HASHES = {v: f"{v:016x}" for v in range(6)}


def rollout(step: int, version: int | None, hash_: str | None = None, run_id: str = "train") -> Rollout:
    stamp = None if version is None else PolicyStamp(version=version, hash=hash_ or HASHES[version])
    return Rollout(trace_id=f"trace_{step}_{version}_{hash_}", task_id="t", run_id=run_id, step=step,
                   messages=(Message(role="user", content="hi"),), policy=stamp)


def test_synchronous_steps_sample_from_the_weights_of_the_step_before() -> None:
    versions = Versions(frozenset({0, 1, 2}), bound=0)
    train = [rollout(1, 0), rollout(2, 1), rollout(3, 2)]
    evals = [rollout(0, 0, run_id="train:eval-000000"), rollout(2, 2, run_id="train:eval-000002")]
    check = check_policy_stamps(train, evals, versions, {2: HASHES[2]})
    assert check.verdict == "pass" and "5 rollouts over 3 weight versions; 1 checkpoints hashed" in check.measured
    stale = check_policy_stamps([*train, rollout(3, 1)], evals, versions, {})
    assert stale.verdict == "fail" and "of step 3: sampled by step 1's weights" in stale.details[0]
    assert "expected step 2's" in stale.details[0]
    assert check_policy_stamps(train, [rollout(2, 1, run_id="train:eval-000002")], versions, {}).verdict == "fail"


def test_async_rollouts_may_lag_and_a_step_that_taught_nothing_made_no_new_weights() -> None:
    # max_off_policy_steps 1: step 3's rollouts from the weights after step 1 or 2
    lagging = Versions(frozenset({0, 1, 2}), bound=1)
    assert check_policy_stamps([rollout(3, 1), rollout(3, 2)], [], lagging, {}).verdict == "pass"
    assert check_policy_stamps([rollout(3, 0)], [], lagging, {}).verdict == "fail"
    # step 2 had an empty batch: step 3's rollouts are still sampled by step 1's weights
    skipped = Versions(frozenset({0, 1, 3}), bound=0)
    assert check_policy_stamps([rollout(3, 1), rollout(4, 3)], [], skipped, {}).verdict == "pass"


def test_one_version_one_hash_and_checkpoints_match_their_stamps() -> None:
    versions = Versions(frozenset({0, 1}), bound=0)
    twice = check_policy_stamps([rollout(2, 1), rollout(2, 1, "f" * 16)], [], versions, {})
    assert twice.verdict == "fail" and "step 1's weights appear with 2 hashes" in twice.details[0]
    bad = check_policy_stamps([rollout(2, 1)], [], versions, {1: "e" * 16})
    assert bad.verdict == "fail" and f"checkpoint step-000001 holds weights {'e' * 16}" in bad.details[0]
    none = check_policy_stamps([rollout(1, None)], [], versions, {})
    assert none.verdict == "skip"

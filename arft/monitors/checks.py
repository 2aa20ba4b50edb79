"""The monitors: each one a pure function of the steps so far (``StepSignals``, oldest first,
the latest last) and the job's ``monitors`` section, returning a ``Verdict`` about the latest step.

No state lives here: the same history gives the same verdict, so a resumed run that replays its
stored steps sees what the interrupted one saw, and each rule is tested with synthetic series.
The rules and their defaults are documented, with their limits, in docs/monitors.md.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from arft.config.monitors import DriftSpec, MonitorsSpec, SpikeSpec
from arft.monitors.rules import (Getter, Verdict, baseline, current, finite, held, observed, recent, robust_z,
                                 stalled)
from arft.monitors.signals import EvalSignal, StepSignals


def entropy_collapse(hist: Sequence[StepSignals], m: MonitorsSpec) -> Verdict:
    """Value: the sampled tokens' surprisal over its baseline. Alarm: at most ``collapse_ratio``
    of it while the reward stalls."""
    spec = m.entropy_collapse
    now = current(hist, lambda s: s.surprisal)
    base = baseline(observed(hist, lambda s: s.surprisal), m)
    if now is None or base is None or base <= 0:
        return Verdict()
    ratio = now / base
    stuck, gain = stalled(hist, m, spec.min_reward_gain)
    if ratio <= spec.collapse_ratio and stuck:
        return Verdict(ratio, f"sampled-token entropy {now:.3f} is {ratio:.0%} of its baseline {base:.3f} "
                              f"while the train reward moved {gain:+.3f}")
    return Verdict(ratio)


def kl_acceleration(hist: Sequence[StepSignals], m: MonitorsSpec) -> Verdict:
    """Value: this step's KL increase over the median increase of the last ``history`` steps.
    Alarm: at least ``factor`` times it, with the KL at least ``min_kl``."""
    spec = m.kl_acceleration
    now = current(hist, lambda s: s.kl)
    kls = observed(hist, lambda s: s.kl)[-(m.history + 1):]
    if now is None or len(kls) < 4:  # two earlier increments at least: one is no "usual"
        return Verdict()
    steps = [b - a for a, b in zip(kls, kls[1:])]
    typical = max(statistics.median(abs(d) for d in steps[:-1]), spec.min_kl / 10, 1e-9)
    ratio = steps[-1] / typical
    if now >= spec.min_kl and steps[-1] > 0 and ratio >= spec.factor:
        return Verdict(ratio, f"KL rose by {steps[-1]:.4f} to {now:.4f} this step, {ratio:.1f}x its usual "
                              f"increase ({typical:.4f})")
    return Verdict(ratio)


def spike(hist: Sequence[StepSignals], m: MonitorsSpec, spec: SpikeSpec, get: Getter, what: str) -> Verdict:
    """Value: the robust z-score of the latest value against the last ``history`` ones. Alarm: a
    non-finite value, or a z of at least ``z`` at ``ratio`` times the median and ``min_value``."""
    now = current(hist, get)
    if now is None:
        return Verdict()
    if not finite(now):
        return Verdict(None, f"{what} is {now} (not finite)")
    before = [x for x in observed(hist[:-1], get) if finite(x)][-m.history:]
    if len(before) < 3:
        return Verdict()
    z, med = robust_z(now, before)
    if z >= spec.z and now >= spec.ratio * med and now >= spec.min_value:
        return Verdict(z, f"{what} {now:.4g} is {z:.1f} robust standard deviations above its recent "
                          f"median {med:.4g}")
    return Verdict(z)


def clip_fraction_spike(hist: Sequence[StepSignals], m: MonitorsSpec) -> Verdict:
    return spike(hist, m, m.clip_fraction_spike, lambda s: s.clip_fraction, "clip fraction")


def grad_norm_spike(hist: Sequence[StepSignals], m: MonitorsSpec) -> Verdict:
    return spike(hist, m, m.grad_norm_spike, lambda s: s.grad_norm, "gradient norm")


def sub_grader_dominance(hist: Sequence[StepSignals], m: MonitorsSpec) -> Verdict:
    """Value: the largest sub-score share of the explained reward variance. Alarm: the same
    sub-score holds at least ``dominance_share`` for ``patience`` steps."""
    shares = hist[-1].sub_shares if hist else {}
    if not shares:
        return Verdict()
    top = max(shares, key=lambda n: shares[n])
    share = shares[top]
    need = m.sub_graders.dominance_share
    if held(hist, m.patience, lambda s: s.sub_shares.get(top, 0.0) >= need):
        return Verdict(share, f"sub-grader {top!r} carries {share:.0%} of the reward's variance within groups "
                              f"({m.patience} steps in a row): the other sub-graders barely move the reward")
    return Verdict(share)


def sub_grader_divergence(hist: Sequence[StepSignals], m: MonitorsSpec) -> Verdict:
    """Value: the largest rise minus the largest fall of a sub-score's recent mean over its
    baseline. Alarm: one rose and another fell by at least ``min_change``."""
    if not hist or not hist[-1].sub_means:
        return Verdict()
    moves: dict[str, float] = {}
    for name in hist[-1].sub_means:
        values = [s.sub_means[name] for s in hist if name in s.sub_means]
        base, now = baseline(values, m), recent(values, m)
        if base is not None and now is not None:
            moves[name] = now - base
    if len(moves) < 2:
        return Verdict()
    up, down = max(moves, key=lambda n: moves[n]), min(moves, key=lambda n: moves[n])
    spread, need = moves[up] - moves[down], m.sub_graders.min_change
    if moves[up] >= need and moves[down] <= -need:
        return Verdict(spread, f"sub-grader {up!r} rose {moves[up]:+.3f} while {down!r} fell {moves[down]:+.3f} "
                               "since the baseline")
    return Verdict(spread)


def drift(hist: Sequence[StepSignals], m: MonitorsSpec, spec: DriftSpec, get: Getter,
          correlation: Getter | None, what: str) -> Verdict:
    """Value: the relative change of ``what`` from its baseline. Alarm: a drift (``rel_change``
    and ``min_change``) while the reward stalls; or (with ``correlation``) the reward following
    ``what`` within groups (mean correlation of the last ``window`` steps) while ``what`` is
    above its baseline."""
    now, base = current(hist, get), baseline(observed(hist, get), m)
    if now is None or base is None:
        return Verdict()
    rel = now / base - 1 if base > 0 else (float("inf") if now > 0 else 0.0)
    value = rel if finite(rel) else None
    stuck, gain = stalled(hist, m, spec.min_reward_gain)
    change = f"{what} moved from {base:.3g} to {now:.3g} ({rel:+.0%})"
    if abs(rel) >= spec.rel_change and abs(now - base) >= spec.min_change and stuck:
        return Verdict(value, f"{change} while the train reward moved {gain:+.3f}")
    follows = None
    if correlation is not None and spec.correlation is not None:
        follows = recent(observed(hist, correlation), m)
    if follows is not None and spec.correlation is not None and follows >= spec.correlation and now > base:
        return Verdict(value, f"the reward follows the {what} within groups (correlation {follows:.2f}) and "
                              f"it {'rose' if rel > 0 else 'moved'} from {base:.3g} to {now:.3g}: the grader "
                              "may pay for it")
    return Verdict(value)


def length_drift(hist: Sequence[StepSignals], m: MonitorsSpec) -> Verdict:
    return drift(hist, m, m.length_drift, lambda s: s.length, lambda s: s.length_correlation,
                 "answer length (characters)")


def tool_calls_drift(hist: Sequence[StepSignals], m: MonitorsSpec) -> Verdict:
    return drift(hist, m, m.tool_calls_drift, lambda s: s.tool_calls, None, "tool calls per rollout")


def equal_groups(hist: Sequence[StepSignals], m: MonitorsSpec) -> Verdict:
    """Value: the share of groups with equal, not all passing, rewards. Alarm: at least ``share``
    for ``patience`` steps in a row."""
    now = current(hist, lambda s: s.equal_groups)
    if now is None:
        return Verdict()
    need = m.equal_groups.share
    if held(hist, m.patience, lambda s: s.equal_groups is not None and s.equal_groups >= need):
        return Verdict(now, f"{now:.0%} of the groups had equal rewards without all passing, {m.patience} steps "
                            "in a row: they give no learning signal")
    return Verdict(now)


def train_eval_divergence(hist: Sequence[StepSignals], evals: Sequence[EvalSignal], m: MonitorsSpec) -> Verdict:
    """At an evaluation. Value: the train reward's change since the previous evaluation minus the
    eval reward's. Alarm: the train reward rose and the eval reward fell by ``min_change`` each."""
    if len(evals) < 2:
        return Verdict()
    prev, last = evals[-2], evals[-1]
    before, after = _train_level(hist, prev.step, m), _train_level(hist, last.step, m)
    if before is None or after is None:
        return Verdict()
    d_train, d_eval = after - before, last.reward - prev.reward
    need = m.train_eval_divergence.min_change
    if d_train >= need and d_eval <= -need:
        return Verdict(d_train - d_eval, f"since the evaluation of step {prev.step} the train reward rose "
                                         f"{d_train:+.3f} while the held-out reward fell {d_eval:+.3f}")
    return Verdict(d_train - d_eval)


def _train_level(hist: Sequence[StepSignals], step: int, m: MonitorsSpec) -> float | None:
    """The train reward at ``step``: the mean of the last ``window`` steps up to it (before any
    step, the first ``window`` steps: the level training started from)."""
    upto = observed([s for s in hist if s.step <= step], lambda s: s.reward)
    if upto:
        return recent(upto, m)
    first = observed(hist, lambda s: s.reward)[:m.window]
    return statistics.fmean(first) if first else None

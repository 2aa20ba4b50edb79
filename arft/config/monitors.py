"""The ``monitors:`` section of a job: the live monitors of ``arft train`` (``arft.monitors``).

Each monitor watches one signal of the run, step by step, and raises an alarm by a documented
rule against the run's own baseline (the first ``baseline_steps`` steps: the policy before
training moved it) or its own recent history. They are on by default; every threshold is a
field here, and ``monitors.<name>.enabled: false`` turns one off (``monitors.enabled: false``
all of them). docs/monitors.md explains each signal and rule, and what they cannot promise.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveFloat

from arft.config.base import Spec


class MonitorSpec(Spec):
    """What every monitor has: a switch."""

    enabled: bool = True
    """false: the monitor is not computed (no metric, no alarm)."""


class EntropySpec(MonitorSpec):
    """Entropy collapse: the sampled tokens' mean surprisal (−logprob, an entropy estimate) falls
    far below the baseline while the reward does not improve."""

    collapse_ratio: float = Field(0.25, gt=0, lt=1)
    """Alarm when the surprisal is at most this share of its baseline..."""
    min_reward_gain: float = 0.1
    """...and the train reward (mean of the last ``window`` steps) rose less than this above its
    baseline (a policy that sharpens because it solves the tasks is not collapsing)."""


class KlSpec(MonitorSpec):
    """KL acceleration: KL to the reference grows by much more per step than it used to."""

    factor: PositiveFloat = 3.0
    """Alarm when this step's KL increase is at least this many times the median increase so far..."""
    min_kl: float = Field(0.05, ge=0)
    """...and the KL itself is at least this (KL is 0 when ``training.kl_coef`` is 0: the monitor idles)."""


class SpikeSpec(MonitorSpec):
    """A spike of one update metric against its own recent history (robust z-score)."""

    z: PositiveFloat = 6.0
    """Alarm when (value − median) / (1.4826 · MAD) of the last ``history`` steps is at least this..."""
    ratio: PositiveFloat = 3.0
    """...and the value is at least this many times that median..."""
    min_value: float = Field(0.0, ge=0)
    """...and at least this (absolute). A non-finite value is an alarm at once."""


class SubGraderSpec(MonitorSpec):
    """A ``multi`` grader's sub-scores: one carrying the reward's variance, or one rising while
    another falls. Idle with a grader that returns no sub-scores."""

    dominance_share: float = Field(0.8, gt=0, le=1)
    """Dominance: alarm when one sub-score's share of the reward's within-group variance (Pratt's
    measure over a least-squares fit of the reward on the sub-scores) is at least this for
    ``patience`` steps."""
    min_change: PositiveFloat = 0.15
    """Divergence: alarm when one sub-score's mean rose by at least this over its baseline while
    another's fell by at least this (means of the last ``window`` steps)."""


class DriftSpec(MonitorSpec):
    """A behaviour (response length, tool calls) drifting from its baseline while the reward stalls."""

    rel_change: PositiveFloat = 0.5
    """Drift: the value moved by at least this share of its baseline..."""
    min_change: float = Field(20.0, ge=0)
    """...and by at least this much (characters of the answer; calls per rollout)..."""
    min_reward_gain: float = 0.05
    """...while the train reward rose less than this above its baseline: an alarm."""
    correlation: float | None = Field(0.8, ge=-1, le=1)
    """Also an alarm: within groups the reward follows the behaviour (mean correlation of the
    last ``window`` steps at least this) while the behaviour is above its baseline: a grader
    that pays for length. null: not checked."""


def _tool_calls_drift() -> DriftSpec:
    return DriftSpec(min_change=0.5, correlation=None)


class EqualGroupsSpec(MonitorSpec):
    """Groups whose rewards are all equal (no learning signal), leaving out groups that all passed."""

    share: float = Field(1.0, gt=0, le=1)
    """Alarm when at least this share of the step's groups have equal rewards without all
    passing, for ``patience`` steps in a row."""


class DivergenceSpec(MonitorSpec):
    """Train/eval divergence: the train reward rises while the held-out evaluation falls."""

    min_change: PositiveFloat = 0.1
    """Alarm at an evaluation when, since the previous one, the train reward rose and the eval
    reward fell by at least this each."""


class MonitorsSpec(Spec):
    """The live monitors of ``arft train`` (docs/monitors.md): metrics ``monitor/<name>`` every
    step, an alarm as a warning, an event in the run store and a section of the report."""

    enabled: bool = True
    """false: no monitor runs."""
    on_alarm: Literal["warn", "stop"] = "warn"
    """warn: report the alarm and go on; stop: save a checkpoint of the step and end the run
    (resume it with ``arft train --resume RUN_DIR``)."""
    baseline_steps: int = Field(1, ge=1)
    """A monitor's baseline is the median of its first this-many steps (the first step samples
    the policy before any update)."""
    window: int = Field(2, ge=1)
    """Recent values are the mean of the last this-many steps (the reward, sub-scores, correlations)."""
    history: int = Field(8, ge=3)
    """Spikes are measured against the last this-many steps (at least 3 before one can fire)."""
    patience: int = Field(2, ge=1)
    """Steps in a row a per-step condition must hold (dominance, equal groups)."""
    entropy_collapse: EntropySpec = Field(default_factory=EntropySpec)
    """Entropy collapse (sampled-token surprisal) while the reward stalls."""
    kl_acceleration: KlSpec = Field(default_factory=KlSpec)
    """KL to the reference growing faster and faster."""
    clip_fraction_spike: SpikeSpec = Field(default_factory=lambda: SpikeSpec(min_value=0.2))
    """A spike of the share of clipped tokens (``update/clip_fraction``)."""
    grad_norm_spike: SpikeSpec = Field(default_factory=SpikeSpec)
    """A spike of the gradient norm (``update/grad_norm``)."""
    sub_graders: SubGraderSpec = Field(default_factory=SubGraderSpec)
    """One sub-grader dominating the reward's variance, or rising while another falls."""
    length_drift: DriftSpec = Field(default_factory=DriftSpec)
    """The final answer's length drifting while the reward stalls, or the reward following it."""
    tool_calls_drift: DriftSpec = Field(default_factory=_tool_calls_drift)
    """Tool calls per rollout drifting while the reward stalls."""
    equal_groups: EqualGroupsSpec = Field(default_factory=EqualGroupsSpec)
    """The share of groups with equal rewards (nothing to learn from)."""
    train_eval_divergence: DivergenceSpec = Field(default_factory=DivergenceSpec)
    """The train reward rising while the held-out evaluation falls."""

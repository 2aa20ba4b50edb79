"""Every seed a run derives from its one ``seed``: the data order, each step's rollouts, each
rollout, each turn, evaluations, a vLLM look-ahead, the choices of one served request.

A run is reproducible to the last digit when every random draw has a seed that depends only on
where the draw is (which epoch, step, task, sample, turn), never on what else runs at the same
time. The derivations are sums with spacings chosen so the streams of different places do not
meet in practice:

* one **turn** is ``+ 1`` (``turn_seed``), so a rollout has room for 1000 turns;
* one **sample** is ``+ 1000`` (``sample_seed``: sample ``k`` of task ``i``);
* one training **step** is ``+ 1_000_000`` (``step_seed``), room for 1000 rollouts a step;
* **evaluations** start ``EVAL_SEED_OFFSET`` above the run's seed (``eval_seed``), the same at
  every step, so eval curves compare like with like;
* a stuck group's **rescue** samples (``training.rescue``) take step seeds of their own:
  ``HINT_SEED_OFFSET`` above the run's seed for the hinted rung, ``EXPLORE_SEED_OFFSET`` for the
  hotter one;
* the **data order** of epoch ``e`` shuffles with ``seed * 1_000_003 + e`` (``data_order_seed``).

These numbers are part of every stored run's meaning: changing one changes what a seeded run
samples, so a resumed or repeated run would no longer match the original.
"""

from __future__ import annotations

EVAL_SEED_OFFSET = 7_919_000
"""Evaluations sample from ``seed + EVAL_SEED_OFFSET``: away from every training step's seeds."""
HINT_SEED_OFFSET = 7_777_777
"""Rescue's hinted samples: the step seeds of ``seed + HINT_SEED_OFFSET``."""
EXPLORE_SEED_OFFSET = 5_555_555
"""Rescue's exploration rung (``explore_temperature``): the step seeds of ``seed + EXPLORE_SEED_OFFSET``."""
_DATA_ORDER_MULTIPLIER = 1_000_003
"""A prime, so neighbouring run seeds give unrelated epoch orders."""
_STEP_SPACING = 1_000_000
_SAMPLE_SPACING = 1000


def data_order_seed(base: int, epoch: int) -> int:
    """The seed that shuffles the training set for ``epoch`` (``arft.data.order``)."""
    return base * _DATA_ORDER_MULTIPLIER + epoch


def step_seed(base: int, step: int, group_size: int, tasks_before: int = 0) -> int:
    """The seed of training step ``step``'s rollouts; ``tasks_before``: tasks this step already
    ran (dynamic sampling draws more), whose ``group_size`` samples each took the seeds before."""
    return base + _STEP_SPACING * step + _SAMPLE_SPACING * group_size * tasks_before


def eval_seed(base: int) -> int:
    """The seed of every evaluation of a run seeded ``base`` (the same at every step)."""
    return base + EVAL_SEED_OFFSET


def sample_seed(base: int, samples: int, task: int, sample: int) -> int:
    """The seed of sample ``sample`` (of ``samples``) of the ``task``-th task of a batch seeded
    ``base``: the same whatever else runs concurrently."""
    return base + _SAMPLE_SPACING * (samples * task + sample)


def turn_seed(rollout: int, turn: int) -> int:
    """The seed of assistant turn ``turn`` (0-based) of a rollout seeded ``rollout``."""
    return rollout + turn


def look_ahead_seed(turn: int, prompt_tokens: int) -> int:
    """The seed of one vLLM request of a turn seeded ``turn``, whose prompt is ``prompt_tokens``
    long: a look-ahead after a stop (a longer prompt) draws its own stream."""
    return turn + prompt_tokens


def choice_seed(request: int, choice: int) -> int:
    """The seed of choice ``choice`` of a served request seeded ``request`` (``n`` > 1)."""
    return request + choice

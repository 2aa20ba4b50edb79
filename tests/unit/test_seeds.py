"""``arft.seeds`` gives exactly the numbers each place computed before it existed: a seeded run
must sample the same tokens to the last digit, before and after."""

from __future__ import annotations

import itertools

from arft.seeds import (EVAL_SEED_OFFSET, choice_seed, data_order_seed, eval_seed, look_ahead_seed, sample_seed,
                        step_seed, turn_seed)


def test_the_derivations_are_the_ones_written_out_before() -> None:
    for base, step, group, done in itertools.product([0, 3, 42, 2**31 - 1], [0, 1, 7], [1, 8], [0, 2]):
        assert step_seed(base, step, group, tasks_before=done) == base + 1_000_000 * step + 1000 * group * done
    for base, epoch in itertools.product([0, 7, 42], [0, 1, 5]):
        assert data_order_seed(base, epoch) == base * 1_000_003 + epoch
    assert EVAL_SEED_OFFSET == 7_919_000 and eval_seed(42) == 42 + 7_919_000
    for base, samples, i, k in itertools.product([0, 42], [1, 4], [0, 3], [0, 2]):
        assert sample_seed(base, samples, i, k) == base + 1000 * (samples * i + k)
    assert turn_seed(1234, 3) == 1237 and look_ahead_seed(1237, 50) == 1287 and choice_seed(9, 2) == 11


def test_streams_of_neighbouring_places_do_not_meet() -> None:
    """A rollout's turns stay below the next sample's seed; a step's samples below the next step's."""
    assert turn_seed(sample_seed(0, 8, 0, 0), 999) < sample_seed(0, 8, 0, 1)
    assert sample_seed(step_seed(0, 1, 8), 8, 124, 7) < step_seed(0, 2, 8)

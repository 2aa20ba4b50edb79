"""The Hypothesis profile of the fuzz tests (``make test``), and the targets they share.

``arft-fuzz`` runs each target on ``FUZZ_EXAMPLES`` generated inputs (all of them together well
under a minute on a laptop CPU); ``python -m bench run fuzz`` runs the
same targets (``bench/lib/fuzz``) at 10,000 inputs each.
No example database: a failure prints its input (and ``@reproduce_failure``) instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
from hypothesis import HealthCheck, settings

from bench.lib.fuzz.targets import Target, open_targets

FUZZ_EXAMPLES = 300

settings.register_profile(
    "arft-fuzz", max_examples=FUZZ_EXAMPLES, database=None, print_blob=True,
    # No wall-clock deadline: a busy machine would make it flaky. A hang is caught instead by
    # targets.time_limit, which counts the CPU seconds an input uses.
    deadline=None,
    # Near-valid inputs are big by design, and a few deep ones take PyYAML seconds.
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
settings.load_profile("arft-fuzz")


@pytest.fixture(scope="session")
def fuzz_targets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Target]]:
    """Every fuzz target, over one scratch folder and one tool server on 127.0.0.1."""
    root: Path = tmp_path_factory.mktemp("fuzz")
    with open_targets(root) as targets:
        yield targets

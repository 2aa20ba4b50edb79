"""Shared fixtures: the real tokenizer of the embedded model and a tiny model built from a config."""

from __future__ import annotations

import os
from typing import Any

import pytest

# A parallel worker's consoles are wide: rich folds a line at the console's width, even inside a
# path, and a worker's temporary paths are longer (popen-gwN/), so the 80 columns that pytest-xdist
# passes on would fold messages the tests look for. (Only in workers: the controller prints the
# progress, at the terminal's own width.)
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["COLUMNS"] = "400"

# With several xdist workers, each worker's torch (and the servers it starts) gets its share of
# the cores: two workers of two OpenMP threads each on two cores wait on each other at every op.
_workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
if _workers > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // _workers)))


@pytest.fixture(scope="session")
def tokenizer() -> Any:
    """The embedded SmolLM2 tokenizer (the GGUF is converted and cached on first use)."""
    from arft.models.loading import load_tokenizer

    return load_tokenizer("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def tiny_model(tokenizer: Any) -> Any:
    """A 2-layer, 64-wide Llama over the real vocabulary: fast, no downloads."""
    import torch

    from arft.models.loading import tiny_model as build

    torch.set_num_threads(1)
    return build(tokenizer)


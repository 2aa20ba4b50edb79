"""Shared fixtures: the real tokenizer of the embedded model and a tiny model built from a config."""

from __future__ import annotations

from typing import Any

import pytest


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

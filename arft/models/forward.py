"""What calling a Hugging Face model's forward pass needs to know about its signature."""

from __future__ import annotations

import inspect
from typing import Any

from arft.models.peft_layers import unwrap


def forward_parameters(model: Any) -> Any:
    """The parameters of ``model.forward`` (peft wrappers: their base model's)."""
    return inspect.signature(unwrap(model).forward).parameters


def cache_keyword(model: Any) -> str:
    """The KV-cache keyword of ``model.forward``: ``cache`` since transformers 5.x renamed it,
    ``past_key_values`` before."""
    return "cache" if "cache" in forward_parameters(model) else "past_key_values"

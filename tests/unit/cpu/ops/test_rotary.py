"""The fused rotary embedding (``arft.cpu.ops.rotary``): Hugging Face's rotation and gradient; it
runs only where autograd records and while installed (``arft.cpu.patch``)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from arft.cpu import kernels as cpu_kernels
from arft.cpu import patch
from arft.cpu.ops import rotary

KERNELS = cpu_kernels.load()
pytestmark = pytest.mark.skipif(KERNELS is None or not KERNELS.train.ops or not KERNELS.small_ops,
                                reason=f"arft's AVX-512 CPU kernels unavailable: {cpu_kernels.unavailable()}")


@pytest.fixture
def tiny_model(tokenizer: Any) -> Any:
    from arft.models.loading import tiny_model as build

    return build(tokenizer, hidden=64)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotation_and_gradient_are_hugging_faces(dtype: torch.dtype) -> None:
    from transformers.models.llama import modeling_llama

    gen = torch.Generator().manual_seed(2)
    q = torch.randn(2, 5, 3, 64, generator=gen).to(dtype).transpose(1, 2)  # [B, H, T, D] view, as the layers pass
    angles = torch.randn(1, 5, 32, generator=gen)
    cos, sin = (f(torch.cat([angles, angles], -1)).to(dtype) for f in (torch.cos, torch.sin))
    grad = torch.randn(2, 3, 5, 64, generator=gen).to(dtype)
    q1, q2 = (q.detach().clone().requires_grad_() for _ in range(2))
    original = modeling_llama.apply_rotary_pos_emb
    original = getattr(original, "keywords", {}).get("original", original)
    want, _ = original(q1, q1, cos, sin)
    got = rotary.Rotary.apply(q2, cos, sin, KERNELS)
    assert torch.equal(got, want)  # the same roundings
    want.backward(grad)
    got.backward(grad)
    assert torch.allclose(q2.grad.float(), q1.grad.float(), atol=1e-6 if dtype == torch.float32 else 2e-2)


def test_the_rotation_is_fused_only_where_recorded_and_while_on(tiny_model: Any,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    apply = rotary.Rotary.apply
    monkeypatch.setattr(rotary.Rotary, "apply", lambda *a: seen.append(1) or apply(*a))
    ids = torch.tensor([[5, 6, 7, 8]])
    try:
        assert patch.install(tiny_model, train=True, ops={"rotary"}).rotary >= 1
        with torch.no_grad():
            want = tiny_model(input_ids=ids).logits
        assert not seen
        got = tiny_model(input_ids=ids).logits
        assert len(seen) == 4 and torch.equal(got, want)  # queries and keys of two layers; the same values
        got.sum().backward()
        patch.uninstall(tiny_model)
        assert patch.installed(tiny_model).rotary == 0
        tiny_model(input_ids=ids).logits.sum().backward()
        assert len(seen) == 4
    finally:
        patch.uninstall(tiny_model)

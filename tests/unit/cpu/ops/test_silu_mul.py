"""The MLP's fused ``silu(gate) * up`` (``arft.cpu.ops.silu_mul``): it and its gradients equal
Hugging Face's MLP within a bfloat16 rounding; MLPs are fused only where autograd records or in the
trainer's passes."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from arft.cpu import kernels as cpu_kernels
from arft.cpu import patch
from arft.cpu.ops import silu_mul
from arft.cpu.patch import TRAINER_PASSES

KERNELS = cpu_kernels.load()
pytestmark = pytest.mark.skipif(KERNELS is None or not KERNELS.train.ops or not KERNELS.small_ops,
                                reason=f"arft's AVX-512 CPU kernels unavailable: {cpu_kernels.unavailable()}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_silu_mul_and_gradients_are_hugging_faces(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(1)
    gate, up = (torch.randn(3, 5, 200, generator=gen).to(dtype) for _ in range(2))
    grad = torch.randn(3, 5, 200, generator=gen).to(dtype)
    g1, u1, g2, u2 = (x.clone().requires_grad_() for x in (gate, up, gate, up))
    want = torch.nn.functional.silu(g1) * u1
    got = silu_mul.SiluMul.apply(g2, u2, KERNELS)
    assert torch.allclose(got.float(), want.float(), atol=1e-5 if dtype == torch.float32 else 1e-2)
    want.backward(grad)
    got.backward(grad)
    tol = 1e-5 if dtype == torch.float32 else 2e-2  # bf16: one rounding here, two or three in PyTorch's
    assert torch.allclose(g2.grad.float(), g1.grad.float(), atol=tol, rtol=tol)
    assert torch.allclose(u2.grad.float(), u1.grad.float(), atol=tol, rtol=tol)


@pytest.fixture
def tiny_model(tokenizer: Any) -> Any:
    from arft.models.loading import tiny_model as build

    return build(tokenizer, hidden=64)


def test_mlps_fused_only_where_autograd_records_or_in_the_trainers_passes(tiny_model: Any,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    apply = silu_mul.SiluMul.apply
    monkeypatch.setattr(silu_mul.SiluMul, "apply", lambda *a: seen.append(1) or apply(*a))
    mlp_ops = {"silu_mul", "rotary"}
    assert patch.install(tiny_model, train=True, ops=mlp_ops).mlps == 2
    assert patch.install(tiny_model, train=True, ops=mlp_ops).mlps == 2  # idempotent
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        want = tiny_model(input_ids=ids).logits
    assert not seen  # the engine sampling through the policy: the module's own
    with torch.no_grad(), TRAINER_PASSES.on():
        got = tiny_model(input_ids=ids).logits
    assert len(seen) == 2 and torch.allclose(got, want, atol=1e-5)
    tiny_model(input_ids=ids).logits.sum().backward()
    assert len(seen) == 4
    patch.uninstall(tiny_model)
    assert patch.installed(tiny_model).mlps == 0 and "forward" not in tiny_model.model.layers[0].mlp.__dict__

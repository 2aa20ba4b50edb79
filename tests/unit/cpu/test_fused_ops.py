"""The update's fused elementwise steps (``arft.cpu.fused_ops``): the token logprobs, entropy
and their gradient equal PyTorch's log-softmax path (float32 and bfloat16 logits, temperatures,
a target at a vector's edge); silu(gate) * up and its gradients equal Hugging Face's MLP within a
bfloat16 rounding; MLPs are fused only where autograd records or in the trainer's passes; the
learner's update is the same with them or without."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

from arft.config import TrainingSpec
from arft.cpu import kernels as cpu_kernels
from arft.cpu import fused_lora
from arft.cpu import fused_norm
from arft.cpu import fused_ops
from arft.trainer.learner import Learner, wrap_policy
from tests.unit.trainer.test_learner import rollout

KERNELS = cpu_kernels.load()
pytestmark = pytest.mark.skipif(KERNELS is None or not KERNELS.train.ops or not KERNELS.small_ops,
                                reason=f"arft's AVX-512 CPU kernels unavailable: {cpu_kernels.unavailable()}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_token_logprobs_and_gradient_are_pytorchs(dtype: torch.dtype, temperature: float) -> None:
    gen = torch.Generator().manual_seed(0)
    logits = (3 * torch.randn(7, 1003, generator=gen)).to(dtype)  # a vocabulary off the vector width
    targets = torch.tensor([0, 1002, 16, 15, 999, 500, 3])
    grad = torch.randn(7, generator=gen)
    theirs, mine = (logits.clone().requires_grad_() for _ in range(2))
    want_lp, want_ent = fused_ops.token_logprobs(theirs, targets, temperature, fused=False)
    got_lp, got_ent = fused_ops.token_logprobs(mine, targets, temperature, fused=True)
    assert got_lp.grad_fn is not None and type(got_lp.grad_fn).__name__.startswith("TokenLogprobs")
    assert torch.allclose(got_lp, want_lp, atol=2e-5) and torch.allclose(got_ent, want_ent, atol=2e-5)
    assert not got_ent.requires_grad
    (want_lp * grad).sum().backward()
    (got_lp * grad).sum().backward()
    assert mine.grad.dtype == dtype
    assert torch.allclose(mine.grad.float(), theirs.grad.float(), atol=1e-6 if dtype == torch.float32 else 4e-3)


def test_token_logprobs_refuse_a_target_outside_the_vocabulary() -> None:
    with pytest.raises(ValueError, match="outside the vocabulary"):
        fused_ops.token_logprobs(torch.randn(2, 10), torch.tensor([1, 10]), 1.0, fused=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_silu_mul_and_gradients_are_hugging_faces(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(1)
    gate, up = (torch.randn(3, 5, 200, generator=gen).to(dtype) for _ in range(2))
    grad = torch.randn(3, 5, 200, generator=gen).to(dtype)
    g1, u1, g2, u2 = (x.clone().requires_grad_() for x in (gate, up, gate, up))
    want = torch.nn.functional.silu(g1) * u1
    got = fused_ops.SiluMul.apply(g2, u2, KERNELS)
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
    apply = fused_ops.SiluMul.apply
    monkeypatch.setattr(fused_ops.SiluMul, "apply", lambda *a: seen.append(1) or apply(*a))
    assert fused_ops.set_fused(tiny_model) == 2 and fused_ops.set_fused(tiny_model) == 2  # idempotent
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        want = tiny_model(input_ids=ids).logits
    assert not seen  # the engine sampling through the policy: the module's own
    with torch.no_grad(), fused_lora.passes():
        got = tiny_model(input_ids=ids).logits
    assert len(seen) == 2 and torch.allclose(got, want, atol=1e-5)
    tiny_model(input_ids=ids).logits.sum().backward()
    assert len(seen) == 4
    assert fused_ops.set_fused(tiny_model, False) == 0 and "forward" not in tiny_model.model.layers[0].mlp.__dict__


def test_the_update_is_the_same_with_the_cpu_kernels_or_without(tiny_model: Any,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """``training.cpu_kernels``: fused norms, MLPs, rotations and logprobs (float32 here)."""
    from arft.trainer.batching import to_train_batch

    ran: dict[str, int] = {}
    for function in (fused_ops.TokenLogprobs, fused_ops.SiluMul, fused_ops.Rotary):
        apply = function.apply
        monkeypatch.setattr(function, "apply", lambda *a, f=function, apply=apply: ran.update(
            {f.__name__: ran.get(f.__name__, 0) + 1}) or apply(*a))
    batch = to_train_batch([rollout([5, 6, 7, 8, 9], [0, 0, 1, 1, 1]), rollout([5, 6, 7, 3], [0, 0, 1, 1])],
                           [1.0, -1.0])
    stats = []
    try:
        for on in (False, True):
            spec = TrainingSpec(cpu_kernels=on, bf16_autocast=False)
            learner = Learner(wrap_policy(copy.deepcopy(tiny_model).float(), spec, 0), spec, lr=1e-3,
                              total_steps=4, temperature=0.8, pad_id=0)
            stats.append(learner.update(batch))
            assert bool(ran) is on, ran  # the fused paths ran in the update with the kernels only
            assert (fused_ops.set_fused(learner.policy, on) > 0) is on
            assert (fused_norm.set_fused(learner.policy, on) > 0) is on
    finally:
        fused_ops.set_rotary(False)
    assert set(ran) == {"TokenLogprobs", "SiluMul", "Rotary"}
    for key in ("update/grad_norm", "update/entropy"):
        assert stats[1][key] == pytest.approx(stats[0][key], rel=1e-5), key


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
    got = fused_ops.Rotary.apply(q2, cos, sin, KERNELS)
    assert torch.equal(got, want)  # the same roundings
    want.backward(grad)
    got.backward(grad)
    assert torch.allclose(q2.grad.float(), q1.grad.float(), atol=1e-6 if dtype == torch.float32 else 2e-2)


def test_the_rotation_is_fused_only_where_recorded_and_while_on(tiny_model: Any,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    apply = fused_ops.Rotary.apply
    monkeypatch.setattr(fused_ops.Rotary, "apply", lambda *a: seen.append(1) or apply(*a))
    ids = torch.tensor([[5, 6, 7, 8]])
    try:
        assert fused_ops.set_rotary(True) >= 1
        with torch.no_grad():
            want = tiny_model(input_ids=ids).logits
        assert not seen
        got = tiny_model(input_ids=ids).logits
        assert len(seen) == 4 and torch.equal(got, want)  # queries and keys of two layers; the same values
        got.sum().backward()
        assert fused_ops.set_rotary(False) == 0
        tiny_model(input_ids=ids).logits.sum().backward()
        assert len(seen) == 4
    finally:
        fused_ops.set_rotary(False)

"""The update's fused RMSNorm (``arft.cpu.ops.rms_norm``): Hugging Face's outputs and gradients
(input and weight), only where autograd records or in the trainer's own passes, the module's own
forward elsewhere (the same update with the CPU kernels as without: ``test_silu_mul``)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

from arft.config import TrainingSpec
from arft.cpu import kernels as cpu_kernels
from arft.cpu import patch
from arft.cpu.ops import rms_norm
from arft.cpu.patch import TRAINER_PASSES
from arft.trainer.learner import Learner, wrap_policy
from tests.unit.trainer.test_learner import rollout

KERNELS = cpu_kernels.load()
NORM = {"rms_norm"}
pytestmark = pytest.mark.skipif(KERNELS is None or not KERNELS.small_ops,
                                reason=f"arft CPU kernels unavailable: {cpu_kernels.unavailable()}")


@pytest.fixture
def tiny_model(tokenizer: Any) -> Any:
    """A fresh tiny model (the session's is shared with engine tests)."""
    from arft.models.loading import tiny_model as build

    return build(tokenizer, hidden=64)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry for every call of the fused function from here on."""
    seen: list[int] = []
    apply = rms_norm.RmsNorm.apply
    monkeypatch.setattr(rms_norm.RmsNorm, "apply", lambda *a: seen.append(1) or apply(*a))
    return seen


def test_outputs_and_gradients_are_hugging_faces() -> None:
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    theirs = LlamaRMSNorm(96, eps=1e-5)
    theirs.weight.data = 1 + 0.3 * torch.randn(96)
    mine = copy.deepcopy(theirs)
    assert patch.install(mine, train=True, ops=NORM).norms == 1
    assert patch.install(mine, train=True, ops=NORM).norms == 1  # idempotent
    x = torch.randn(2, 7, 96, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    grad = torch.randn(2, 7, 96)
    want, got = theirs(x), mine(x2)
    assert torch.allclose(got, want, atol=1e-6)
    want.backward(grad)
    got.backward(grad)
    assert torch.allclose(x2.grad, x.grad, atol=1e-5), (x2.grad - x.grad).abs().max()
    assert torch.allclose(mine.weight.grad, theirs.weight.grad, rtol=1e-5, atol=1e-5)
    patch.uninstall(mine)
    assert patch.installed(mine).norms == 0 and "forward" not in mine.__dict__


def test_fused_only_where_autograd_records_or_in_the_trainers_passes(tiny_model: Any, calls: list[int]) -> None:
    assert patch.install(tiny_model, train=True, ops=NORM).norms == 2 * 2 + 1  # two a layer, and the final norm
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():  # the engine sampling through the policy: the model's own norm
        tiny_model(input_ids=ids)
    assert not calls
    with torch.no_grad(), TRAINER_PASSES.on():  # the old-logprob pass: what the update computes
        tiny_model(input_ids=ids)
    assert len(calls) == 5
    with torch.autocast("cpu", dtype=torch.bfloat16):
        tiny_model(input_ids=ids).logits.float().sum().backward()
    assert len(calls) == 10  # float32 residual stream under bf16 autocast: fused
    calls.clear()
    tiny_model.to(torch.bfloat16)(input_ids=ids).logits.float().sum().backward()
    assert len(calls) == 5  # bf16 weights and activations: fused too
    calls.clear()
    with torch.enable_grad():
        tiny_model.model.norm(torch.randn(2, 64, requires_grad=True))  # float32 activations, bf16 weight
    assert not calls  # mixed dtypes: the model's own norm


def test_the_learner_fuses_again_after_a_reset_of_the_norms(tiny_model: Any, calls: list[int]) -> None:
    """A Hugging Face model's ``train()`` re-applies its hub kernels, which puts every norm's own
    forward back; the learner fuses them again at every update."""
    from arft.trainer.batching import to_train_batch

    spec = TrainingSpec(bf16_autocast=False)
    learner = Learner(wrap_policy(copy.deepcopy(tiny_model).float(), spec, 0), spec, lr=1e-3, total_steps=4,
                      temperature=1.0, pad_id=0)
    assert patch.install(learner.policy, train=True, ops=NORM).norms == 5
    for module in learner.policy.modules():
        if rms_norm.fusable(module):
            del module.__dict__["forward"]  # what the hub kernels' reset does
    assert patch.install(learner.policy, train=True, ops=()).norms == 0
    learner.update(to_train_batch([rollout([5, 6, 7, 8], [0, 0, 1, 1])], [1.0]))
    assert len(calls) == 5


@pytest.mark.parametrize("residual", [torch.bfloat16])
def test_bfloat16_norm_and_gradient_match_hugging_faces_within_bf16(residual: torch.dtype) -> None:
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    theirs = LlamaRMSNorm(96, eps=1e-5).to(residual)
    theirs.weight.data = (1 + 0.3 * torch.randn(96)).to(residual)
    mine = copy.deepcopy(theirs)
    patch.install(mine, train=True, ops=NORM)
    x = torch.randn(4, 96).to(residual).requires_grad_()
    x2 = x.detach().clone().requires_grad_()
    grad = torch.randn(4, 96).to(residual)
    want, got = theirs(x), mine(x2)
    assert torch.equal(got, want)  # the forward rounds where Hugging Face's does
    want.backward(grad)
    got.backward(grad)
    assert torch.allclose(x2.grad.float(), x.grad.float(), rtol=2e-2, atol=2e-2)
    assert torch.allclose(mine.weight.grad.float(), theirs.weight.grad.float(), rtol=3e-2, atol=3e-2)

"""The fused LoRA linear layer: peft's outputs and gradients, peft's forward wherever it must."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

from arft.config import TrainingSpec
from arft.config.sections import LoraSpec
from arft.cpu import patch
from arft.cpu.ops.lora import LoraLinear, fusable
from arft.trainer.learner import Learner, wrap_policy
from arft.trainer.loss import token_logprobs
from tests.unit.trainer.test_learner import rollout


@pytest.fixture
def tiny_model(tokenizer: Any) -> Any:
    """A fresh tiny model: the session's is shared with engine tests, which pack its linears."""
    from arft.models.loading import tiny_model as build

    return build(tokenizer)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry for every call of the fused function from here on."""
    seen: list[int] = []
    apply = LoraLinear.apply
    monkeypatch.setattr(LoraLinear, "apply", lambda *a: seen.append(1) or apply(*a))
    return seen


def policies(tiny_model: Any, dropout: float = 0.0) -> tuple[Any, Any]:
    """Two identical LoRA policies over copies of the tiny model, adapters non-zero (peft starts B
    at zero, which would hide every term through it): the first stays peft's, the second is fused."""
    spec = TrainingSpec(lora=LoraSpec(dropout=dropout), fused_lora=False)
    peft_policy = wrap_policy(copy.deepcopy(tiny_model).float(), spec, 0)
    torch.manual_seed(1)
    for name, p in peft_policy.named_parameters():
        if "lora_B" in name:
            p.data.normal_(0, 0.05)
    fused = copy.deepcopy(peft_policy)
    return peft_policy, fused


def batch_ids() -> torch.Tensor:
    return torch.randint(3, 400, (2, 12), generator=torch.Generator().manual_seed(0))


def logits_and_grads(policy: Any, ids: torch.Tensor, autocast: bool = False) -> tuple[torch.Tensor, list]:
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        out = policy(input_ids=ids).logits.float()
    (out.square().mean()).backward()
    grads = [p.grad.clone() for p in policy.parameters() if p.requires_grad]
    policy.zero_grad(set_to_none=True)
    return out.detach(), grads


def test_fused_layers_give_peft_outputs_and_gradients(tiny_model: Any) -> None:
    peft_policy, fused = policies(tiny_model)
    assert patch.install(fused, train=True, ops={patch.LORA}).lora == 14  # 2 layers x (q, k, v, o, gate, up, down)
    ids = batch_ids()
    want, want_grads = logits_and_grads(peft_policy, ids)
    got, got_grads = logits_and_grads(fused, ids)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert len(got_grads) == len(want_grads) == 28
    for g, w in zip(got_grads, want_grads):
        assert w.abs().max() > 0  # every adapter matrix gets a gradient, A and B alike
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-6)
        assert g.dtype == torch.float32


def test_fused_layers_under_bf16_autocast_match_peft_within_bf16(tiny_model: Any) -> None:
    peft_policy, fused = policies(tiny_model)
    patch.install(fused, train=True, ops={patch.LORA}).lora
    ids = batch_ids()
    ref, ref_grads = logits_and_grads(peft_policy, ids)  # float32: the reference for both
    ref_flat = torch.cat([r.flatten() for r in ref_grads])
    errors = {}
    for name, policy in (("peft", peft_policy), ("fused", fused)):
        out, grads = logits_and_grads(policy, ids, autocast=True)
        flat = torch.cat([g.flatten() for g in grads])
        errors[name] = (float((out - ref).abs().max()), float((flat - ref_flat).norm() / ref_flat.norm()))
    assert errors["fused"][0] < 0.05 and errors["fused"][1] < 0.05
    # bf16 rounding either way; the fused layer's is no worse than peft's own
    assert errors["fused"][0] <= 2 * errors["peft"][0] and errors["fused"][1] <= 2 * errors["peft"][1]


def test_fused_function_gives_adapter_gradients_without_an_input_gradient() -> None:
    x = torch.randn(5, 8)  # the first layer's input: nothing upstream trains
    w, bias = torch.randn(6, 8), torch.randn(6)
    a, b = torch.randn(2, 8, requires_grad=True), torch.randn(6, 2, requires_grad=True)
    y = LoraLinear.apply(x, w, bias, a, b, 0.5)
    want = x @ w.t() + bias + (x @ a.t()) @ (0.5 * b).t()
    torch.testing.assert_close(y, want)
    got_grads = torch.autograd.grad(y.square().sum(), (a, b))
    for g, w_ in zip(got_grads, torch.autograd.grad(want.square().sum(), (a, b))):
        torch.testing.assert_close(g, w_)


def test_fused_function_with_bias_matches_the_formula() -> None:
    torch.manual_seed(0)
    x = torch.randn(3, 4, 8, requires_grad=True)
    w, bias = torch.randn(6, 8), torch.randn(6)
    a, b = torch.randn(2, 8, requires_grad=True), torch.randn(6, 2, requires_grad=True)
    want = x @ w.t() + bias + (x @ a.t()) @ b.t() * 0.5
    got = LoraLinear.apply(x, w, bias, a, b, 0.5)
    torch.testing.assert_close(got, want)
    grads = torch.autograd.grad(got.sum(), (x, a, b))
    want_grads = torch.autograd.grad(want.sum(), (x, a, b))
    for g, w_ in zip(grads, want_grads):
        torch.testing.assert_close(g, w_)


def test_disabled_adapter_merged_and_unfused_layers_go_to_peft(tiny_model: Any) -> None:
    _, fused = policies(tiny_model)
    patch.install(fused, train=True, ops={patch.LORA}).lora
    ids = batch_ids()
    with torch.no_grad():
        base = tiny_model.float()(input_ids=ids).logits
    with fused.disable_adapter():  # the KL term's reference policy
        torch.testing.assert_close(fused(input_ids=ids).logits, base)
    adapted = fused(input_ids=ids).logits.detach()
    assert (adapted - base).abs().max() > 1e-4
    fused.merge_adapter()  # merged: the base layer alone holds the adapter
    torch.testing.assert_close(fused(input_ids=ids).logits.detach(), adapted, rtol=1e-4, atol=1e-5)
    fused.unmerge_adapter()
    assert patch.install(fused, train=True, ops=()).lora == 0
    assert all("forward" not in m.__dict__ for m in fused.modules())  # peft's own forward again
    torch.testing.assert_close(fused(input_ids=ids).logits.detach(), adapted, rtol=1e-5, atol=1e-5)


def test_fused_only_where_autograd_records(tiny_model: Any, calls: list[int]) -> None:
    _, fused = policies(tiny_model)
    patch.install(fused, train=True, ops={patch.LORA}).lora
    with torch.no_grad():  # the engine sampling through the adapter: peft's forward, packed products
        fused(input_ids=batch_ids())
    assert calls == []
    fused(input_ids=batch_ids())
    assert len(calls) == 14


def test_trainer_passes_without_gradient_run_fused(tiny_model: Any) -> None:
    # the old-logprob pass of updates_per_batch > 1 computes what the update pass computes
    from arft.trainer.batching import micro_batches, to_train_batch

    spec = TrainingSpec(bf16_autocast=True, updates_per_batch=2)
    learner = Learner(policies(tiny_model)[1], spec, lr=1e-3, total_steps=2, temperature=1.0, pad_id=0)
    rs = [rollout(list(range(5, 5 + n)), [0] * (n - 3) + [1] * 3) for n in (7, 9)]
    mb = micro_batches(to_train_batch(rs, [1.0, -1.0]), 8)[0]
    with learner._autocast():
        recorded = token_logprobs(learner.policy, mb, 1.0, False)[0].detach()
    learner.spec = spec.model_copy(update={"share_prefix": False})
    assert torch.equal(learner._logprobs_no_grad(mb), recorded)
    with torch.no_grad(), learner._autocast():  # outside the trainer's passes: peft's arithmetic
        assert not torch.equal(token_logprobs(learner.policy, mb, 1.0, False)[0], recorded)


def test_adapters_peft_runs_otherwise_are_not_fused(tiny_model: Any, calls: list[int]) -> None:
    peft_policy, fused = policies(tiny_model)
    patch.install(fused, train=True, ops={patch.LORA}).lora
    q_proj = fused.base_model.model.model.layers[0].self_attn.q_proj
    q_proj.base_layer.weight.requires_grad_(True)  # a trainable base weight needs peft's graph
    q_proj.lora_B["default"].bias = torch.nn.Parameter(torch.zeros(q_proj.out_features))  # an adapter bias
    k_proj = fused.base_model.model.model.layers[0].self_attn.k_proj
    k_proj.base_layer.weight.requires_grad_(True)
    fused(input_ids=batch_ids())
    assert len(calls) == 12


def test_packed_base_layers_are_fused(tiny_model: Any) -> None:
    from arft.cpu import packed_linear

    peft_policy, fused = policies(tiny_model)
    if not packed_linear.available():
        pytest.skip("no oneDNN packed linear in this torch build")
    assert packed_linear.enable(fused) > 0  # the engine packs the policy it samples through
    assert patch.install(fused, train=True, ops={patch.LORA}).lora == 14
    ids = batch_ids()
    want, want_grads = logits_and_grads(peft_policy, ids)
    got, got_grads = logits_and_grads(fused, ids)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-6)


def test_adapters_with_dropout_run_peft(tiny_model: Any, calls: list[int]) -> None:
    _, with_dropout = policies(tiny_model, dropout=0.1)
    assert patch.install(with_dropout, train=True, ops={patch.LORA}).lora == 14 and all(fusable(m) for m in with_dropout.modules() if "forward" in m.__dict__)
    with_dropout.train()
    with_dropout(input_ids=batch_ids())
    assert calls == []


@pytest.mark.parametrize("fused,checkpointing", [(True, False), (False, False), (True, True)])
def test_learner_fuses_as_the_spec_says_and_updates_alike(tiny_model: Any, fused: bool, checkpointing: bool) -> None:
    rs = [rollout(list(range(5, 5 + n)), [0] * (n - 3) + [1] * 3) for n in (7, 9, 8)]
    from arft.trainer.batching import to_train_batch

    batch = to_train_batch(rs, [1.0, -1.0, 0.5])
    states = []
    for on in (fused, not fused):
        spec = TrainingSpec(fused_lora=on, bf16_autocast=False, gradient_checkpointing=checkpointing)
        learner = Learner(wrap_policy(copy.deepcopy(tiny_model).float(), spec, 0), spec, lr=1e-2,
                          total_steps=4, temperature=1.0, pad_id=0)
        assert any("forward" in m.__dict__ for m in learner.policy.modules() if fusable(m)) is on
        for _ in range(2):  # the first step moves B off zero, the second trains A through it
            learner.update(batch)
        states.append(learner.trainable_state())
    assert states[0].keys() == states[1].keys()
    for key in states[0]:
        torch.testing.assert_close(states[0][key], states[1][key], rtol=1e-4, atol=1e-6)


def test_token_logprobs_with_shared_prefix_run_fused(tiny_model: Any) -> None:
    rs = [rollout([5, 6, 7, 8, 9, 10 + n], [0, 0, 0, 1, 1, 1]) for n in range(3)]
    from arft.trainer.batching import micro_batches, to_train_batch

    mb = micro_batches(to_train_batch(rs, [1.0, -1.0, 0.5]), 8, 0, None, True)[0]
    peft_policy, fused = policies(tiny_model)
    patch.install(fused, train=True, ops={patch.LORA}).lora
    torch.testing.assert_close(token_logprobs(fused, mb, 1.0, True)[0],
                               token_logprobs(peft_policy, mb, 1.0, True)[0], rtol=1e-5, atol=1e-5)

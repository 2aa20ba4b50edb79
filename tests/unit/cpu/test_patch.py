"""The one module that patches transformers models (``arft.cpu.patch``): ``install`` then
``uninstall`` leaves transformers' functions, every module's forward and the attention
implementation as they were; the process-wide rotation goes with the last policy holding it; the
update with the patches computes what it computes without them."""

from __future__ import annotations

import copy
import gc
import sys
from typing import Any

import pytest
import torch

from arft.config import TrainingSpec
from arft.cpu import attention
from arft.cpu import kernels as cpu_kernels
from arft.cpu import patch
from arft.cpu.ops import rotary, silu_mul
from arft.cpu.ops import token_logprobs as logprobs_op
from arft.trainer.learner import Learner, wrap_policy
from tests.unit.trainer.test_learner import rollout

KERNELS = cpu_kernels.load()
kernels_run = pytest.mark.skipif(KERNELS is None or not KERNELS.train.ops or not KERNELS.small_ops,
                                 reason=f"arft's AVX-512 CPU kernels unavailable: {cpu_kernels.unavailable()}")


@pytest.fixture
def tiny_model(tokenizer: Any) -> Any:
    from arft.models.loading import tiny_model as build

    built = build(tokenizer, hidden=64)
    built.set_attn_implementation("sdpa")
    return built


def state(policy: Any) -> dict[str, Any]:
    """What the patches touch: the modelling modules' rotation, each module's own forward and
    marks, the attention implementation."""
    rotations = {name: getattr(sys.modules.get(name), "apply_rotary_pos_emb", None) for name in rotary.MODULES}
    forwards = [(m.__dict__.get("forward"), sorted(k for k in m.__dict__ if k.startswith("_arft")))
                for m in policy.modules()]
    return {"rotations": rotations, "forwards": forwards, "attention": policy.config._attn_implementation}


def lora_policy(tiny_model: Any) -> Any:
    spec = TrainingSpec(fused_lora=False)
    return wrap_policy(copy.deepcopy(tiny_model), spec, 0)


@pytest.mark.parametrize("kind", ["model", "lora"])
def test_install_then_uninstall_leaves_transformers_as_it_was(tiny_model: Any, kind: str) -> None:
    policy = tiny_model if kind == "model" else lora_policy(tiny_model)
    gc.collect()  # policies other tests dropped no longer hold the rotation (the last one put it back)
    before = state(policy)
    patch.install(policy, train=False)
    got = patch.install(policy, train=True)
    assert got.attention and policy.config._attn_implementation == attention.NAME
    assert (got.lora == 14) is (kind == "lora")  # 2 layers x (q, k, v, o, gate, up, down)
    if KERNELS is not None and KERNELS.train.ops and KERNELS.small_ops:
        assert got.norms == 5 and got.mlps == 2 and got.rotary == 2
    patch.uninstall(policy)
    assert state(policy) == before
    assert patch.installed(policy) == (False, 0, 0, 0, 0, 0)


@kernels_run
def test_the_rotation_goes_with_the_last_policy_holding_it(tiny_model: Any) -> None:
    from transformers.models.llama import modeling_llama

    gc.collect()
    own = modeling_llama.apply_rotary_pos_emb
    other = copy.deepcopy(tiny_model)
    for policy in (tiny_model, other):
        assert patch.install(policy, train=True, ops={"rotary"}).rotary == 2
    fused = modeling_llama.apply_rotary_pos_emb
    assert fused.func is rotary.apply_rotary_pos_emb  # type: ignore[attr-defined]
    patch.uninstall(tiny_model)
    assert modeling_llama.apply_rotary_pos_emb is fused and patch.installed(tiny_model).rotary == 0
    patch.uninstall(other)
    assert modeling_llama.apply_rotary_pos_emb is own  # (still fused where a live policy held it before)


@kernels_run
def test_a_policy_dropped_without_uninstall_gives_the_rotation_back(tiny_model: Any) -> None:
    from transformers.models.llama import modeling_llama

    gc.collect()
    own = modeling_llama.apply_rotary_pos_emb
    dropped = copy.deepcopy(tiny_model)
    assert patch.install(dropped, train=True, ops={"rotary"}).rotary == 2
    assert modeling_llama.apply_rotary_pos_emb is not own
    del dropped
    gc.collect()
    assert modeling_llama.apply_rotary_pos_emb is own  # the last holder went: transformers' own is back


def test_the_engines_attention_goes_back_to_sdpa(tiny_model: Any) -> None:
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        want = tiny_model(input_ids=ids).logits
        assert patch.install(tiny_model, train=False).attention
        assert torch.equal(tiny_model(input_ids=ids).logits, want)  # no keyword: exactly sdpa
    patch.uninstall(tiny_model)
    assert tiny_model.config._attn_implementation == "sdpa" and not patch.installed(tiny_model).attention


@kernels_run
def test_the_update_is_the_same_with_the_cpu_kernels_or_without(tiny_model: Any,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """``training.cpu_kernels``: fused norms, MLPs, rotations and logprobs (float32 here)."""
    from arft.trainer.batching import to_train_batch

    ran: dict[str, int] = {}
    for function in (logprobs_op.TokenLogprobs, silu_mul.SiluMul, rotary.Rotary):
        apply = function.apply
        monkeypatch.setattr(function, "apply", lambda *a, f=function, apply=apply: ran.update(
            {f.__name__: ran.get(f.__name__, 0) + 1}) or apply(*a))
    batch = to_train_batch([rollout([5, 6, 7, 8, 9], [0, 0, 1, 1, 1]), rollout([5, 6, 7, 3], [0, 0, 1, 1])],
                           [1.0, -1.0])
    stats, policies = [], []
    try:
        for on in (False, True):
            spec = TrainingSpec(cpu_kernels=on, bf16_autocast=False)
            learner = Learner(wrap_policy(copy.deepcopy(tiny_model).float(), spec, 0), spec, lr=1e-3,
                              total_steps=4, temperature=0.8, pad_id=0)
            policies.append(learner.policy)
            stats.append(learner.update(batch))
            assert bool(ran) is on, ran  # the fused paths ran in the update with the kernels only
            ops = patch.KERNEL_OPS if on else ()
            assert (patch.install(learner.policy, train=True, ops=ops).mlps > 0) is on
            assert (patch.install(learner.policy, train=True, ops=ops).norms > 0) is on
    finally:
        for policy in policies:
            patch.uninstall(policy)
    assert set(ran) == {"TokenLogprobs", "SiluMul", "Rotary"}
    for key in ("update/grad_norm", "update/entropy"):
        assert stats[1][key] == pytest.approx(stats[0][key], rel=1e-5), key

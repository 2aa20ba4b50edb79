"""Attention on arft's AMX kernels (``arft.cpu.train_attention``, through ``arft.cpu.attention``;
``kernels/train_attention.cpp``): gradients within 2x the error against float64 of PyTorch's flash backward
(grouped queries, right padding, queries after a shared prefix, heads of 32-128, lengths off the
block size, strided inputs), and the forward's output and log-sum-exp too; masked keys get none;
only the masks it reproduces are taken; a model's update takes it only where it applies, with
logits and gradients as close to float32's as ``sdpa``'s, and the trainer's no-gradient passes
compute what its update computes; the engine's cascade attention hands its training calls to it."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

from arft.cpu import kernels as cpu_kernels
from arft.cpu import attention
from arft.cpu import patch
from arft.cpu import train_attention
from arft.cpu.patch import TRAINER_PASSES

KERNELS = cpu_kernels.load()
ATTENTION = {"attention"}
pytestmark = pytest.mark.skipif(KERNELS is None or not KERNELS.train.attention_backward_runs,
                                reason="the attention backward kernel needs AMX (Intel Sapphire Rapids or later)")


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lens: torch.Tensor, scale: float
              ) -> tuple[torch.Tensor, ...]:
    """float64 leaves and attention output: queries the last Tq of Tk, row b sees lens[b] keys."""
    qf, kf, vf = (x.detach().double().requires_grad_() for x in (q, k, v))
    group = q.shape[1] // k.shape[1]
    tq, tk = q.shape[2], k.shape[2]
    seen = (torch.arange(tk) <= torch.arange(tq)[:, None] + tk - tq) & (torch.arange(tk) < lens[:, None, None])
    s = (qf @ kf.repeat_interleave(group, 1).transpose(-1, -2) * scale).masked_fill(~seen[:, None], float("-inf"))
    return qf, kf, vf, s.softmax(-1) @ vf.repeat_interleave(group, 1), seen


CASES = [  # b, hq, hk, tq, tk, d, padding step
    (2, 6, 2, 40, 40, 32, 0),
    (2, 9, 3, 96, 96, 64, 0),
    (3, 4, 4, 70, 100, 64, 13),  # queries after 30 shared positions, right padding
    (2, 2, 1, 33, 33, 128, 5),
    (1, 3, 1, 64, 64, 64, 20),
    (2, 4, 2, 33, 100, 64, 60),  # the second row's 40 keys end before the queries' offset (67)
]


@pytest.mark.parametrize("b,hq,hk,tq,tk,d,pad", CASES)
def test_gradients_are_as_close_to_float64_as_pytorchs(b: int, hq: int, hk: int, tq: int, tk: int, d: int,
                                                       pad: int) -> None:
    gen = torch.Generator().manual_seed(tq + d)
    q = torch.randn(b, hq, tq, d, generator=gen).bfloat16()
    k = torch.randn(b, hk, tk, d, generator=gen).bfloat16()
    v = torch.randn(b, tk, hk, d, generator=gen).bfloat16().transpose(1, 2)  # strided, as Hugging Face's are
    grad = torch.randn(b, tq, hq, d, generator=gen).bfloat16().transpose(1, 2)
    lens = torch.tensor([tk - pad * i for i in range(b)], dtype=torch.int64)
    scale = d ** -0.5
    qf, kf, vf, out64, seen = reference(q, k, v, lens, scale)
    out64.backward(grad.double())
    mask = torch.zeros(b, 1, tq, tk, dtype=torch.bfloat16).masked_fill_(~seen[:, None], float("-inf"))
    theirs = [x.clone().requires_grad_() for x in (q, k, v)]
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(*theirs, 0.0, False, attn_mask=mask,
                                                                        scale=scale)
    out.backward(grad)
    my_out, my_lse = KERNELS.train.attention_forward(q, k, v, lens, scale)
    for got, pytorch, exact in ((my_out, out, out64), (my_lse, lse, None)):
        exact = torch.where(seen.any(-1)[:, None], (qf @ kf.repeat_interleave(hq // hk, 1).transpose(-1, -2) * scale)
                            .masked_fill(~seen[:, None], float("-inf")).logsumexp(-1), 0) if exact is None else exact
        assert (got.double() - exact.detach()).abs().max() <= 1.01 * (pytorch.double() - exact.detach()).abs().max()
    mine = KERNELS.train.attention_backward(q, k, v, my_out, grad, my_lse, lens, scale)
    for name, got, pytorch, exact in zip("qkv", mine, [x.grad for x in theirs], (qf.grad, kf.grad, vf.grad)):
        # dS rounded to bfloat16 before its products (as FlashAttention does): dQ's error may be
        # above PyTorch's (which keeps dS in float32) by a bfloat16 rounding
        rms, their_rms = ((x.double() - exact).norm().item() for x in (got, pytorch))
        assert rms <= max(2 * their_rms, 2e-3 * exact.norm().item()), (name, rms, their_rms)
        worst, their_worst = ((x.double() - exact).abs().max().item() for x in (got, pytorch))
        assert worst <= 2 * their_worst + 4e-3 * exact.abs().max().item(), (name, worst, their_worst)
    for row in range(b):  # keys past a row's length: no gradient
        assert not mine[1][row, :, int(lens[row]):].any() and not mine[2][row, :, int(lens[row]):].any()


def test_it_refuses_what_it_cannot_run() -> None:
    q = torch.randn(1, 2, 32, 64)
    with pytest.raises(ValueError, match="bfloat16"):
        KERNELS.train.attention_backward(q, q, q, q, q, torch.zeros(1, 2, 32), None, 0.125)
    b = q.bfloat16()
    with pytest.raises(ValueError, match="heads of 48"):
        KERNELS.train.attention_backward(b[..., :48], b[..., :48], b[..., :48], b[..., :48], b[..., :48],
                                   torch.zeros(1, 2, 32), None, 0.125)


def causal(b: int, tq: int, tk: int, lens: list[int]) -> torch.Tensor:
    """Hugging Face's boolean mask for queries last, right padding."""
    seen = (torch.arange(tk) <= torch.arange(tq)[:, None] + tk - tq)
    return (seen & (torch.arange(tk) < torch.tensor(lens)[:, None, None]))[:, None]


def test_it_takes_only_the_masks_it_reproduces() -> None:
    q = torch.empty(2, 4, 8, 32, dtype=torch.bfloat16)
    assert train_attention._plan(None, q, 8) == (None,)  # sdpa's is_causal: every key
    assert train_attention._plan(None, q, 12) is None  # mask-free with a prefix: not causal from the end
    assert train_attention._plan(causal(2, 8, 8, [8, 8]), q, 8) == (None,)  # no padding
    assert train_attention._plan(causal(2, 8, 8, [8, 5]), q, 8)[0].tolist() == [8, 5]
    assert train_attention._plan(causal(2, 8, 12, [12, 10]), q, 12)[0].tolist() == [12, 10]  # after a prefix
    assert train_attention._plan(causal(1, 8, 8, [6]), q, 8)[0].tolist() == [6, 6]  # one mask for every row
    left = causal(2, 8, 8, [8, 8])
    left[1, :, :, :2] = False  # left padding
    assert train_attention._plan(left, q, 8) is None
    assert train_attention._plan(torch.ones(2, 1, 8, 8, dtype=torch.bool), q, 8) is None  # not causal
    assert train_attention._plan(causal(2, 8, 12, [12, 12]), q, 10) is None  # wider than the keys
    assert train_attention._plan(causal(2, 8, 8, [8, 8]).float(), q, 8) is None  # an additive mask


@pytest.fixture
def model(tokenizer: Any) -> Any:
    """A tiny Llama with heads of 32 (4 query heads on 2 key/value heads) running sdpa."""
    from arft.models.loading import tiny_model

    built = tiny_model(tokenizer, hidden=128)
    built.set_attn_implementation("sdpa")
    return built


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry for every call that takes the kernel from here on."""
    seen: list[int] = []
    function = train_attention.flash_attention()
    apply = function.apply
    monkeypatch.setattr(function, "apply", lambda *a: seen.append(1) or apply(*a))
    return seen


def gradients(model: Any, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad()
    logits = model(input_ids=ids, attention_mask=mask).logits
    (logits.float().log_softmax(-1)[..., 7] * mask).sum().backward()
    return logits.detach(), {n: p.grad.double().clone() for n, p in model.named_parameters() if p.grad is not None}


def test_a_models_gradients_are_as_close_to_float32s_as_sdpas(model: Any, calls: list[int]) -> None:
    ids = torch.randint(3, 1000, (3, 45))
    mask = torch.ones(3, 45, dtype=torch.long)
    mask[1, 30:], mask[2, 41:] = 0, 0  # right padding
    _, exact = gradients(copy.deepcopy(model).float(), ids, mask)
    theirs_model = copy.deepcopy(model).to(torch.bfloat16)
    mine_model = copy.deepcopy(theirs_model)
    assert patch.install(mine_model, train=True, ops=ATTENTION).attention_layers == 2
    assert mine_model.config._attn_implementation == attention.NAME
    their_logits, theirs = gradients(theirs_model, ids, mask)
    assert not calls
    my_logits, mine = gradients(mine_model, ids, mask)
    assert len(calls) == 2  # one a layer
    real = mask.bool()
    want_logits = copy.deepcopy(model).float()(input_ids=ids, attention_mask=mask).logits.detach()[real]
    err, their_err = ((x[real].double() - want_logits).abs().max().item() for x in (my_logits, their_logits))
    assert err <= 1.5 * their_err
    for name, want in exact.items():
        err, their_err = ((x[name] - want).norm().item() for x in (mine, theirs))
        assert err <= 1.5 * their_err + 1e-3 * want.norm().item(), (name, err, their_err)
    calls.clear()
    with torch.no_grad():
        sampled = mine_model(input_ids=ids, attention_mask=mask).logits  # the engine's pass: sdpa
        assert not calls and torch.equal(sampled, their_logits)
        with TRAINER_PASSES.on():  # the trainer's own: what its update computes
            assert torch.equal(mine_model(input_ids=ids, attention_mask=mask).logits, my_logits)
    assert len(calls) == 2
    calls.clear()
    assert patch.install(mine_model, train=True, ops=()).attention_layers == 0
    gradients(mine_model, ids, mask)
    assert not calls


def test_calls_it_does_not_reproduce_are_sdpas(model: Any, calls: list[int]) -> None:
    ids = torch.randint(3, 1000, (2, 40))
    patch.install(model, train=True, ops=ATTENTION)
    model(input_ids=ids).logits.sum().backward()  # float32: PyTorch's
    assert not calls
    model.to(torch.bfloat16)
    left = torch.ones(2, 40, dtype=torch.long)
    left[1, :4] = 0
    model(input_ids=ids, attention_mask=left).logits.float().sum().backward()
    assert not calls
    model(input_ids=ids).logits.float().sum().backward()
    assert len(calls) == 2


def test_the_shared_prefix_pass_takes_it_after_the_prefix(model: Any, calls: list[int]) -> None:
    from arft.trainer import shared_prefix
    from arft.trainer.batching import Tensors

    model.to(torch.bfloat16)
    patch.install(model, train=True, ops=ATTENTION)
    ids = torch.cat([torch.randint(3, 1000, (1, 40)).expand(3, -1), torch.randint(3, 1000, (3, 20))], dim=1)
    mask = torch.ones(3, 60, dtype=torch.long)
    mask[2, 50:] = 0
    mb = Tensors(input_ids=ids, attention_mask=mask, targets=ids[:, 1:], target_mask=mask[:, 1:],
                 old_logprobs=torch.zeros(3, 59), advantages=torch.zeros(3))
    hidden = shared_prefix.hidden_states(model.model, mb)
    assert len(calls) == 4  # the prefix's pass and the rows' pass, each layer
    hidden.float().sum().backward()


def test_the_engines_cascade_hands_it_training_calls(model: Any, calls: list[int]) -> None:
    model.to(torch.bfloat16)
    assert patch.install(model, train=False).attention and model.config._attn_implementation == attention.NAME
    patch.install(model, train=True, ops=ATTENTION)
    assert model.config._attn_implementation == attention.NAME  # one function: the engine's calls and these
    model(input_ids=torch.randint(3, 1000, (2, 40))).logits.float().sum().backward()
    assert len(calls) == 2
    fresh = copy.deepcopy(model)
    fresh.set_attn_implementation("sdpa")
    patch.install(fresh, train=True, ops=ATTENTION)
    assert patch.install(fresh, train=False).attention  # the engine takes a model the trainer gave its attention


@pytest.mark.parametrize("on", [False, True])
def test_the_learner_takes_it_as_training_cpu_kernels_says(model: Any, calls: list[int], on: bool) -> None:
    from arft.config import TrainingSpec
    from arft.trainer.batching import to_train_batch
    from arft.trainer.learner import Learner, wrap_policy
    from tests.unit.trainer.test_learner import rollout

    spec = TrainingSpec(cpu_kernels=on, bf16_autocast=False)
    learner = Learner(wrap_policy(model.to(torch.bfloat16), spec, 0), spec, lr=1e-3, total_steps=4, temperature=1.0,
                      pad_id=0)
    stats = learner.update(to_train_batch([rollout([5, 6, 7, 8, 9] * 8, [0] * 20 + [1] * 20),
                                           rollout([5, 6, 7, 3] * 7, [0] * 10 + [1] * 18)], [1.0, -1.0]))
    assert stats["update/grad_norm"] > 0
    assert bool(calls) is on

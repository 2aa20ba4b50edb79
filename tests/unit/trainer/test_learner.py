"""Masks, the loss and one update on a tiny model."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from arft.config import TrainingSpec
from arft.records import Rollout
from arft.trainer.batching import micro_batches, to_train_batch
from arft.trainer.learner import Learner, wrap_policy
from arft.trainer.loss import policy_loss
from tests.specs import loss_config


def rollout(ids: list[int], mask: list[int], status: str = "ok") -> Rollout:
    return Rollout(trace_id=f"trace_{len(ids)}_{status}", task_id="t", messages=(), token_ids=tuple(ids),
                   loss_mask=tuple(mask), logprobs=tuple(-1.0 if m else 0.0 for m in mask),
                   status=status)  # type: ignore[arg-type]


def test_batch_keeps_only_trainable_rollouts_and_shifts_masks() -> None:
    rs = [rollout([5, 6, 7, 8], [0, 0, 1, 1]), rollout([5, 6], [0, 1], "infra_failed"),
          rollout([9, 9, 9], [0, 0, 0]), rollout([5, 6, 7], [0, 1, 1])]
    batch = to_train_batch(rs, [1.0, 2.0, 3.0, None])
    assert batch.trace_ids == (rs[0].trace_id,)  # infra-failed, no sampled tokens, no advantage: out
    mb = micro_batches(batch, 8)[0]
    # Position t predicts token t+1: the mask on targets is the loss mask shifted by one.
    assert mb.target_mask.tolist() == [[0.0, 1.0, 1.0]]
    assert mb.targets.tolist() == [[6, 7, 8]] and mb.old_logprobs.tolist() == [[0.0, -1.0, -1.0]]


def test_micro_batches_pad_right_and_cover_everything() -> None:
    rs = [rollout(list(range(3, 3 + n)), [0] * (n - 2) + [1, 1]) for n in (4, 9, 6)]
    batch = to_train_batch(rs, [1.0, -1.0, 0.5])
    mbs = micro_batches(batch, 2, pad_id=0)
    assert [mb.input_ids.shape[0] for mb in mbs] == [2, 1]
    assert sum(mb.n_tokens for mb in mbs) == 6
    assert all((mb.attention_mask.sum(1) > 0).all() for mb in mbs)


def test_micro_batches_hold_at_most_max_tokens_padded_tokens() -> None:
    from arft.trainer.batching import groups_by_length

    lengths = [100, 2500, 300, 2600, 400, 120]
    assert groups_by_length(lengths, 4) == [[0, 5, 2, 4], [1, 3]]  # by length, size only
    groups = groups_by_length(lengths, 4, max_tokens=1000)
    assert groups == [[0, 5, 2], [4], [1], [3]]  # 3 x 300 fits, 4 x 400 does not; long ones alone
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    assert all(len(g) == 1 or len(g) * max(lengths[i] for i in g) <= 1000 for g in groups)
    rs = [rollout(list(range(3, 3 + n)), [0] * (n - 2) + [1, 1]) for n in (4, 9, 6)]
    mbs = micro_batches(to_train_batch(rs, [1.0, -1.0, 0.5]), 8, pad_id=0, max_tokens=12)
    assert [tuple(mb.input_ids.shape) for mb in mbs] == [(2, 6), (1, 9)]
    assert sum(mb.n_tokens for mb in mbs) == 6


def test_sharing_micro_batches_count_the_common_prefix_once() -> None:
    from arft.trainer.batching import groups_sharing_prefixes

    system = list(range(100, 180))  # 80 tokens every sequence of a job starts with
    ids = [system + [7] * n for n in (20, 30, 25)] + [list(range(500, 560)), system + [9] * 40, [1, 2, 3]]
    groups = groups_sharing_prefixes(ids, size=16, max_tokens=250)
    # 80 + 4 x 40 = 240 tokens run (padded: 4 x 120 = 480); the two that share nothing go by length
    assert sorted(map(sorted, groups)) == [[0, 1, 2, 4], [3, 5]]
    assert groups_sharing_prefixes(ids, size=16, max_tokens=200) == [[5, 3], [0, 2, 1], [4]]  # 80 + 3 x 30
    assert groups_sharing_prefixes(ids, size=2, max_tokens=None)[-2:] == [[0, 2], [1, 4]]  # size still holds
    short = [[5] * 10 + [n] for n in range(4)]  # 10 shared tokens: too few to share, padded count
    assert groups_sharing_prefixes(short, size=16, max_tokens=22) == [[0, 1], [2, 3]]
    batch = to_train_batch([rollout(list(x), [0] * (len(x) - 1) + [1]) for x in ids], [1.0] * len(ids))
    mbs = micro_batches(batch, 16, pad_id=0, max_tokens=250, share_prefix=True)
    assert sorted(mb.input_ids.shape[0] for mb in mbs) == [2, 4] and sum(mb.n_tokens for mb in mbs) == 6


def test_loss_is_policy_gradient_at_ratio_one() -> None:
    lp = torch.tensor([-1.0, -2.0], requires_grad=True)
    loss, stats = policy_loss(lp, lp.detach(), lp.detach(), torch.tensor([1.0, -1.0]), loss_config())
    loss.backward()
    assert lp.grad is not None and lp.grad.tolist() == [-1.0, 1.0]  # raise good, lower bad tokens
    assert stats.tokens == 2 and stats.clipped == 0


def test_loss_clips_and_truncates_importance_weights() -> None:
    lp = torch.tensor([0.0], requires_grad=True)
    old = torch.tensor([-1.0])  # ratio e > 1.2: clipped for a positive advantage
    loss, stats = policy_loss(lp, old, old, torch.tensor([1.0]), loss_config(clip_eps=0.2))
    loss.backward()
    assert lp.grad is not None and lp.grad.item() == 0.0 and stats.clipped == 1
    _, s2 = policy_loss(lp, torch.tensor([0.0]), torch.tensor([-5.0]), torch.tensor([1.0]), loss_config(tis_cap=2.0))
    assert s2.tis_truncated == 1


def test_kl_term_is_k3() -> None:
    lp = torch.tensor([-1.0], requires_grad=True)
    ref = torch.tensor([-2.0])
    _, stats = policy_loss(lp, lp.detach(), lp.detach(), torch.tensor([0.0]), loss_config(kl_coef=0.1), ref)
    d = -1.0
    assert stats.kl == pytest.approx(torch.exp(torch.tensor(d)).item() - d - 1)


def _learner(model: Any, **kw: Any) -> Learner:
    spec = TrainingSpec(micro_batch_size=2, learning_rate=1e-2, warmup_steps=0, **kw)
    return Learner(wrap_policy(model, spec, seed=0), spec, lr=1e-2, total_steps=3, temperature=1.0, pad_id=0)


@pytest.mark.parametrize("kw", [{}, {"kl_coef": 0.1, "updates_per_batch": 2}, {"gradient_checkpointing": True}])
def test_one_update_changes_lora_params_with_finite_loss(tokenizer: Any, kw: dict) -> None:
    from arft.models.loading import tiny_model

    learner = _learner(tiny_model(tokenizer, seed=1), **kw)
    before = {k: v.clone() for k, v in learner.trainable_state().items()}
    rs = [rollout([1, 20, 30, 40, 50, 60], [0, 0, 1, 1, 1, 1]), rollout([1, 21, 31, 41], [0, 0, 1, 1]),
          rollout([1, 22, 32, 42, 52], [0, 0, 0, 1, 1])]
    metrics = learner.update(to_train_batch(rs, [1.0, -0.5, -0.5]))
    after = learner.trainable_state()
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert changed and all(torch.isfinite(v).all() for v in after.values())
    assert all(v == v for v in metrics.values())  # no NaN
    assert metrics["update/tokens"] == 8 and metrics["update/grad_norm"] > 0
    if kw:
        assert metrics["update/kl"] >= 0


def test_infra_failed_rollouts_add_nothing_to_the_gradient(tokenizer: Any) -> None:
    from arft.models.loading import tiny_model

    good = [rollout([1, 20, 30, 40], [0, 0, 1, 1]), rollout([1, 21, 31, 41], [0, 0, 1, 1])]
    bad = rollout([1, 25, 35, 45, 55], [0, 1, 1, 1, 1], "infra_failed")
    states = []
    for rs, adv in ((good, [1.0, -1.0]), (good + [bad], [1.0, -1.0, 5.0])):
        learner = _learner(tiny_model(tokenizer, seed=2))
        learner.update(to_train_batch(rs, adv))
        states.append(learner.trainable_state())
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])

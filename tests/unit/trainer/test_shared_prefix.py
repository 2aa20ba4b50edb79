"""The update with the micro-batch's common prefix run once gives the plain pass's logprobs,
entropies and LoRA gradients (up to float rounding)."""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch

from arft.config import TrainingSpec
from arft.records import TrainBatch
from arft.trainer.batching import micro_batches
from arft.trainer.learner import wrap_policy
from arft.trainer.loss import token_logprobs
from arft.trainer.shared_prefix import MIN_PREFIX, common_prefix_length


@pytest.fixture(scope="module")
def policy(tokenizer: Any) -> Any:
    from arft.models.loading import tiny_model

    torch.manual_seed(0)
    model = wrap_policy(tiny_model(tokenizer), TrainingSpec(), seed=1)
    for name, p in model.named_parameters():  # peft starts lora_B at 0: make the adapter matter
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.05)
    return model


def batch(prefix: int, suffixes: list[int], seed: int = 0) -> TrainBatch:
    """Rows of ``prefix`` shared tokens then their own ``suffixes[i]`` tokens, the last half
    sampled (one sampled token inside the shared prefix too)."""
    rng = random.Random(seed)
    shared = [rng.randrange(3, 49152) for _ in range(prefix)]
    ids, masks = [], []
    for n in suffixes:
        row = shared + [rng.randrange(3, 49152) for _ in range(n)]
        mask = [0] * (prefix - 1) + [1] + [0] * (n - n // 2) + [1] * (n // 2)
        ids.append(tuple(row))
        masks.append(tuple(mask))
    return TrainBatch(input_ids=tuple(ids), loss_mask=tuple(masks),
                      old_logprobs=tuple(tuple(-1.0 * m for m in mask) for mask in masks),
                      advantages=tuple(rng.choice([-1.0, 1.0]) for _ in suffixes), trace_ids=("t",) * len(suffixes))


def logprobs_and_grads(policy: Any, mb: Any, share: bool) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    policy.train()
    policy.zero_grad(set_to_none=True)
    lp, entropy = token_logprobs(policy, mb, 0.7, share_prefix=share)
    weights = torch.linspace(-1.0, 1.0, lp.numel())
    (lp * weights).sum().backward()
    grads = [p.grad.clone() for p in policy.parameters() if p.requires_grad]
    policy.eval()
    return lp.detach(), entropy, grads


def test_shared_prefix_gives_the_plain_logprobs_and_gradients(policy: Any) -> None:
    mb = micro_batches(batch(prefix=40, suffixes=[12, 7, 20, 9]), 4, pad_id=0)[0]
    assert common_prefix_length(mb) == 40
    lp, entropy, grads = logprobs_and_grads(policy, mb, share=True)
    lp0, entropy0, grads0 = logprobs_and_grads(policy, mb, share=False)
    assert lp.shape == lp0.shape and lp.numel() == 4 * 1 + 6 + 3 + 10 + 4
    torch.testing.assert_close(lp, lp0, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(entropy, entropy0, atol=1e-4, rtol=1e-5)
    assert any(g.abs().sum() > 0 for g in grads0)
    for g, g0 in zip(grads, grads0):
        torch.testing.assert_close(g, g0, atol=1e-5, rtol=1e-4)


def test_common_prefix_leaves_every_row_a_token_and_needs_two_rows(policy: Any) -> None:
    same = micro_batches(batch(prefix=30, suffixes=[0, 0]), 4, pad_id=0)[0]
    assert common_prefix_length(same) == 29  # identical rows: the last token is each row's own
    one = micro_batches(batch(prefix=30, suffixes=[5]), 4, pad_id=0)[0]
    assert common_prefix_length(one) == 0
    short = micro_batches(batch(prefix=MIN_PREFIX - 1, suffixes=[5, 6]), 4, pad_id=0)[0]
    lp, _, _ = logprobs_and_grads(policy, short, share=True)  # too short to share: the plain pass
    lp0, _, _ = logprobs_and_grads(policy, short, share=False)
    assert torch.equal(lp, lp0)

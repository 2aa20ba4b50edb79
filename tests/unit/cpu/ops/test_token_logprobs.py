"""The sampled tokens' logprobs in one pass (``arft.cpu.ops.token_logprobs``): the logprobs, entropy
and their gradient equal PyTorch's log-softmax path (float32 and bfloat16 logits, temperatures,
a target at a vector's edge)."""

from __future__ import annotations

import pytest
import torch

from arft.cpu import kernels as cpu_kernels
from arft.cpu.ops import token_logprobs as logprobs_op

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
    want_lp, want_ent = logprobs_op.token_logprobs(theirs, targets, temperature, fused=False)
    got_lp, got_ent = logprobs_op.token_logprobs(mine, targets, temperature, fused=True)
    assert got_lp.grad_fn is not None and type(got_lp.grad_fn).__name__.startswith("TokenLogprobs")
    assert torch.allclose(got_lp, want_lp, atol=2e-5) and torch.allclose(got_ent, want_ent, atol=2e-5)
    assert not got_ent.requires_grad
    (want_lp * grad).sum().backward()
    (got_lp * grad).sum().backward()
    assert mine.grad.dtype == dtype
    assert torch.allclose(mine.grad.float(), theirs.grad.float(), atol=1e-6 if dtype == torch.float32 else 4e-3)


def test_token_logprobs_refuse_a_target_outside_the_vocabulary() -> None:
    with pytest.raises(ValueError, match="outside the vocabulary"):
        logprobs_op.token_logprobs(torch.randn(2, 10), torch.tensor([1, 10]), 1.0, fused=True)

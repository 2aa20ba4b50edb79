"""dtype 'auto' picks bf16 only where it is fast: GPUs, and CPUs with native bf16 (measured)."""

from __future__ import annotations


import torch

from arft.models.loading import bf16_is_fast, cpu_bf16_is_fast, pick_dtype


def test_auto_dtype_follows_the_measured_cpu_speed() -> None:
    fast = cpu_bf16_is_fast()  # measured once per process: pick_dtype reads the same verdict
    assert cpu_bf16_is_fast() == fast
    assert pick_dtype("auto", "cpu") == (torch.bfloat16 if fast else torch.float32)
    assert pick_dtype("auto", "cuda") == torch.bfloat16 and bf16_is_fast("cuda")
    assert pick_dtype("float32", "cuda") == torch.float32 and pick_dtype("bfloat16") == torch.bfloat16


def test_bf16_is_chosen_only_where_it_is_measured_faster() -> None:
    # the decision, on timings given (no timed test: the real timings depend on the machine's load)
    assert cpu_bf16_is_fast(lambda dtype: 1.0 if dtype == torch.bfloat16 else 2.0)
    assert not cpu_bf16_is_fast(lambda dtype: 100.0 if dtype == torch.bfloat16 else 1.0)
    assert isinstance(cpu_bf16_is_fast(), bool)  # the real measurement runs

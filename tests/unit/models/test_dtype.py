"""dtype 'auto' picks bf16 only where it is fast: GPUs, and CPUs with native bf16 (measured)."""

from __future__ import annotations

import time

import torch

from arft.models.loading import bf16_is_fast, cpu_bf16_is_fast, pick_dtype


def test_auto_dtype_follows_the_measured_cpu_speed() -> None:
    fast = cpu_bf16_is_fast()
    assert pick_dtype("auto", "cpu") == (torch.bfloat16 if fast else torch.float32)
    assert pick_dtype("auto", "cuda") == torch.bfloat16 and bf16_is_fast("cuda")
    assert pick_dtype("float32", "cuda") == torch.float32 and pick_dtype("bfloat16") == torch.bfloat16


def test_the_measurement_agrees_with_a_larger_matmul() -> None:
    def seconds(dtype: torch.dtype) -> float:
        a = torch.ones(384, 384, dtype=dtype)
        a @ a
        start = time.perf_counter()
        for _ in range(3):
            a @ a
        return time.perf_counter() - start

    bf16, fp32 = seconds(torch.bfloat16), seconds(torch.float32)
    if bf16 > 4 * fp32:  # clearly emulated
        assert not cpu_bf16_is_fast()
    elif fp32 > 1.5 * bf16:  # clearly native
        assert cpu_bf16_is_fast()

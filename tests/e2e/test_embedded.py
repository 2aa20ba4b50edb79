"""The real embedded SmolLM2-135M model on the calculator example (marked: loads the real weights)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from arft.config import load_job
from arft.app.evaluate import evaluate
from arft.data.splits import load_split

EXAMPLE = Path(__file__).parents[2] / "examples" / "calculator" / "job.yaml"
_spec = importlib.util.spec_from_file_location("calculator_tools", EXAMPLE.parent / "tools.py")
assert _spec and _spec.loader
_tools = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_tools)
calculator = _tools.calculator


@pytest.mark.embedded
async def test_embedded_model_calls_the_calculator(tmp_path: Path) -> None:
    job = load_job(EXAMPLE)
    # The tool block's worked example on and a fixed seed: calls in ~half the samples, reproducibly.
    job = job.model_copy(update={"rollout": job.rollout.model_copy(update={"worked_example": True}),
                                 "sampling": job.sampling.model_copy(update={"seed": 11})})
    tasks = load_split(job, "validation", 2)
    result = await evaluate(job, tasks, 4, tmp_path / "run")
    rollouts = result.rollouts
    assert len(rollouts) == 8
    assert all(r.status in ("ok", "truncated") for r in rollouts), [r.error for r in rollouts]
    assert all(r.score is not None and r.score.error is None for r in rollouts)
    # With the worked example the model attempts calls in most samples (69 % measured).
    attempts = sum(len(r.tool_calls) for r in rollouts)
    assert attempts >= 1
    ran = [c for r in rollouts for c in r.tool_calls if c.status == "ok"]
    for call in ran:  # a call that ran returned the calculator's exact result for its arguments
        assert call.name == "calculator"
        assert call.output == calculator(**json.loads(call.arguments))
    for r in rollouts:
        assert len(r.token_ids) == len(r.loss_mask) == len(r.logprobs)
        assert all(lp <= 0.0 for lp, m in zip(r.logprobs, r.loss_mask) if m)

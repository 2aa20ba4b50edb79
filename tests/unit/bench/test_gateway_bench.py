"""bench/gateway.py compares like with like: its agent program lists the tool exactly as arft's own
loop lists it and words the tool's output as the loop does, and its summary pairs the two arms'
rollouts by seed."""

from __future__ import annotations

import argparse
import asyncio

from arft.records import Rollout
from arft.tools.base import ToolContext
from arft.tools.python_fn import PythonTool
from bench import gateway


def test_the_agents_tool_is_the_jobs_tool_as_arft_lists_and_runs_it() -> None:
    tool = PythonTool.from_function(gateway.calculator())
    assert gateway.TOOL_SCHEMA == tool.schema
    ctx = ToolContext(trace_id="t", call_id="c", item={}, workspace=None, turn=0)
    for arguments in ('{"expression": "347 * 29"}', '{"expression": "1 / 0"}', '{"expression": "x"}'):
        own = asyncio.run(tool.call(arguments, ctx)).output
        assert gateway.run_tool(arguments, calls_so_far=0) == own
    assert "budget of 4 calls is spent" in gateway.run_tool('{"expression": "1"}', calls_so_far=4)


def rollout(ids: tuple[int, ...], turns: int = 2) -> Rollout:
    return Rollout(trace_id="t", task_id="a", messages=(), token_ids=ids, loss_mask=(0,) + (1,) * (len(ids) - 1),
                   logprobs=(0.0,) * len(ids), n_turns=turns)


def test_summary_pairs_rollouts_by_seed_and_takes_the_ratio_of_medians() -> None:
    engine = {"prefills": 2, "prefill_tokens": 20, "decode_steps": 5, "generated_tokens": 10}
    own = [rollout((1, 2, 3)), rollout((1, 4, 5))]
    rounds = [{"in-process": {"wall_s": 2.0, "loop_cpu_s": 0.04, "rollouts": own, "engine": engine},
               "gateway": {"wall_s": 4.0, "loop_cpu_s": 0.08, "engine": engine,
                           "rollouts": [rollout((1, 2, 3)), rollout((1, 4, 6))]}}]
    args = argparse.Namespace(samples=2, repeats=1, max_new_tokens=None, concurrency=None, engine="model")
    res = gateway.summarise({"rounds": rounds, "kinds": {"first": 2, "append": 2, "retry": 0, "split": 0},
                             "tasks": 1}, args)
    assert res["ratio_rollouts_per_s"] == 0.5 and res["same_ids"] == "1/2"
    assert res["gateway_prompt_share"] == {"first": 0.5, "append": 0.5}
    assert res["loop_cpu_ms_per_turn"] == {"in-process": 10.0, "gateway": 20.0}
    assert "NOT met (0.50x)" in gateway.report(res)

"""The long_tail example: deterministic data and its worked examples, the search/read tools over
the generated wiki (one search that names the project shows the answer), the job's room for a
tail and its calls budget, and a one-step smoke train on a tiny model with the example's real
tools and grader."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from arft.budget import budget_penalty, usage
from arft.config import load_job
from arft.data.dataset import load_tasks
from arft.graders.registry import build_grader, grade_sample
from arft.graders.validate import sample_from_text
from arft.pyfile import load_file
from arft.records import ToolCallRecord
from arft.tools.base import ToolContext
from arft.tools.registry import open_toolbox
from tests.examples.test_parallel_lookup import generated_rows, smoke_train

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "long_tail"


def module(name: str) -> ModuleType:
    return load_file(EXAMPLE / f"{name}.py", f"long_tail_{name}")


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_generator_is_deterministic_and_the_committed_data_is_current(tmp_path: Path) -> None:
    train, val = generated_rows(EXAMPLE, module("make_data"), tmp_path)
    assert not {r["project"] for r in train} & {r["project"] for r in val}  # held-out projects
    assert len({(r["project"], r["kind"]) for r in train}) == len(train)
    wiki = module("tools").wiki()
    for r in train + val:
        assert r["facts"] == [wiki[r["project"]][r["kind"]]] and r["project"] in r["messages"][-1]["content"]
        same_kind = next(t for t in train if t["kind"] == r["kind"])
        assert r["messages"][:-1] == same_kind["messages"][:-1]  # one set of worked examples per kind
        assert r["project"] not in module("tools").EXAMPLE_PROJECTS


def test_worked_examples_show_the_thorough_habit_of_the_rows_own_kind_with_real_outputs() -> None:
    tools = module("tools")
    by_kind = {r["kind"]: r for r in rows(EXAMPLE / "train.jsonl")}
    assert set(by_kind) == {"codename", "lead", "team"}
    for kind, row in by_kind.items():
        messages = row["messages"]
        calls = [c["function"] for m in messages if m.get("tool_calls") for c in m["tool_calls"]]
        assert [c["name"] for c in calls] == ["search", "read", "search"] + ["search", "read", "search", "read"]
        outputs = [m["content"] for m in messages if m["role"] == "tool"]
        assert outputs == [getattr(tools, c["name"])(**json.loads(c["arguments"])) for c in calls]
        questions = [m["content"] for m in messages[1:-1] if m["role"] == "user"]
        answers = [m["content"] for m in messages[1:-1] if m["role"] == "assistant" and m["content"]]
        facts = [tools.wiki()[p][kind] for p in tools.EXAMPLE_PROJECTS]
        # the row's own kind of question, and the first search of each example already showed the fact
        assert all(q.replace(p, "") == messages[-1]["content"].replace(row["project"], "")
                   for q, p in zip(questions, tools.EXAMPLE_PROJECTS))
        assert all(f in a for f, a in zip(facts, answers)) and facts[0] in outputs[0] and facts[1] in outputs[3]


def test_one_search_of_the_question_shows_its_answer_first() -> None:
    tools = module("tools")
    for r in rows(EXAMPLE / "train.jsonl") + rows(EXAMPLE / "validation.jsonl"):
        first = tools.search(r["messages"][-1]["content"]).splitlines()[0]
        assert first.startswith(r["project"] + ":") and r["facts"][0] in first


async def test_tools_through_the_job_search_read_and_errors() -> None:
    job = load_job(EXAMPLE / "job.yaml")
    box = await open_toolbox(job.rl.tools, job.base_dir)
    try:
        assert set(box.tools) == {"search", "read"}
        # the job's schemas bound every string (a constrained call closes it in time)
        params = {n: t.schema["function"]["parameters"] for n, t in box.tools.items()}
        assert params["search"]["properties"]["query"]["maxLength"] == 40

        async def run(name: str, **args: str) -> Any:
            return await box.tools[name].call(json.dumps(args), ToolContext(trace_id="trace_t", call_id="c", item={}))

        wiki = module("tools").wiki()
        hit = await run("search", query="Falcon codename")
        assert hit.status == "ok" and f"codename {wiki['Falcon']['codename']}" in hit.output.splitlines()[0]
        assert len(hit.output.splitlines()) == 3
        page = await run("read", project="the Falcon project")  # forgiving: any words around the name
        assert page.status == "ok" and f"lead: {wiki['Falcon']['lead']}" in page.output
        missing = await run("read", project="Atlantis")
        assert missing.status == "tool_error" and "search for the project first" in missing.output
        assert (await run("search", query="?!")).status == "tool_error"
        assert (await run("search", query="zzz")).output.startswith("No page matches")
    finally:
        await box.aclose()


async def test_grader_rewards_the_fact() -> None:
    job = load_job(EXAMPLE / "job.yaml")
    grader = build_grader(job.rl.grader, job.base_dir)
    item = rows(EXAMPLE / "validation.jsonl")[0]
    for text, expected in ((f"The answer is {item['facts'][0]}.", 1.0), ("", 0.0), ("I do not know.", 0.0)):
        s = await grade_sample(grader, sample_from_text(text), item)
        assert s.error is None and s.score == expected


def test_job_leaves_room_for_a_tail_and_charges_calls_past_two() -> None:
    job = load_job(EXAMPLE / "job.yaml")
    assert job.rollout.tool_choice == "auto" and job.rl.max_episode_steps == 16
    assert job.rollout.max_turns > job.rl.max_episode_steps
    assert job.rollout.constrained_tool_calls in ("auto", True)  # every call valid (transformers engine)
    b = job.budget
    assert (b.unit, b.soft_limit) == ("calls", 2)

    def penalty(n: int) -> float:
        calls = [ToolCallRecord(trace_id="t", call_id=f"c{i}", name="search", arguments="{}", output="", turn=i)
                 for i in range(n)]
        return budget_penalty(usage(calls, b.unit), b.soft_limit, b.penalty, b.kind)

    assert penalty(1) == penalty(2) == 0.0 and penalty(12) == pytest.approx(10 * b.penalty)
    for split in ("train.jsonl", "validation.jsonl"):
        assert len(load_tasks(EXAMPLE / split)) == len(rows(EXAMPLE / split))


async def test_one_training_step_on_a_tiny_model(tmp_path: Path, tokenizer: Any) -> None:
    result, stored = await smoke_train(load_job(EXAMPLE / "job.yaml"), EXAMPLE, tmp_path, tokenizer, max_turns=3)
    assert result.history[0]["train/budget_penalty_mean"] >= 0.0
    assert all(c.name in ("search", "read") for r in stored for c in r.model_calls)

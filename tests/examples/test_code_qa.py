"""The code_qa example: deterministic data, explorable questions, the real tools, the fact_recall
grader, the job, and one smoke training step on a tiny model."""

from __future__ import annotations

import filecmp
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from arft.config import load_job
from arft.graders.registry import build_grader, grade_sample
from arft.tools.base import ToolContext
from arft.tools.python_fn import PythonTool
from arft.pyfile import load_file
from tests.examples.plain_variant import check_plain_variant

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "code_qa"


def load(name: str) -> ModuleType:
    return load_file(EXAMPLE / f"{name}.py", f"code_qa_{name}_test")


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def same_tree(a: Path, b: Path) -> bool:
    cmp = filecmp.dircmp(a, b)
    if cmp.left_only or cmp.right_only or cmp.funny_files:
        return False
    _, mismatch, errors = filecmp.cmpfiles(a, b, cmp.common_files, shallow=False)
    return not mismatch and not errors and all(same_tree(a / d, b / d) for d in cmp.common_dirs)


def test_generator_is_deterministic_sized_and_committed(tmp_path: Path) -> None:
    make_data = load("make_data")
    make_data.build(tmp_path / "a")
    make_data.build(tmp_path / "b")
    assert same_tree(tmp_path / "a", tmp_path / "b")
    for name in ("train.jsonl", "validation.jsonl", "train_10.jsonl"):  # the committed data is current
        assert (tmp_path / "a" / name).read_bytes() == (EXAMPLE / name).read_bytes(), name
    assert same_tree(tmp_path / "a" / "codebase", EXAMPLE / "codebase")
    train, val = rows(tmp_path / "a" / "train.jsonl"), rows(tmp_path / "a" / "validation.jsonl")
    assert len(train) >= 100 and len(val) >= 50
    assert rows(tmp_path / "a" / "train_10.jsonl") == train[:10]
    question = lambda r: r["messages"][-1]["content"]  # noqa: E731
    assert not {question(r) for r in train} & {question(r) for r in val}
    assert not {r["service"] for r in train} & {r["service"] for r in val}  # unseen services
    assert all(1 <= len(r["facts"]) <= 3 for r in train + val)
    files = list((tmp_path / "a").rglob("*"))
    assert 40 <= len(files) <= 300 and sum(f.stat().st_size for f in files if f.is_file()) < 3_000_000


def test_plain_rows_are_the_same_tasks_without_worked_examples(tmp_path: Path) -> None:
    load("make_data").build(tmp_path, plain=True)
    assert not (tmp_path / "train.jsonl").exists()  # --plain leaves the full rows alone
    check_plain_variant(EXAMPLE, tmp_path)


def test_every_question_is_explorable_and_its_facts_are_verbatim() -> None:
    tools = load("tools")
    root = EXAMPLE / "codebase"
    for r in rows(EXAMPLE / "train.jsonl") + rows(EXAMPLE / "validation.jsonl"):
        hits = tools.search_in(root, r["messages"][-1]["content"])
        # Searching the question's own words reaches the service's files ...
        assert f"services/{r['service']}/" in hits, r["id"]
        # ... and every fact is written verbatim in the codebase (a path fact names a real file)
        text = "".join(p.read_text() for p in root.rglob("*") if p.is_file())
        assert all(f in text or (root / f).is_file() for f in r["facts"]), r["id"]
        # the worked examples end with an answer, then the question: never this row's facts
        prompt = json.dumps(r["messages"])
        assert not any(f in prompt for f in r["facts"] if not f.startswith("services/")), r["id"]


async def test_tools_answer_a_real_task_through_the_python_tool_path() -> None:
    job = load_job(EXAMPLE / "job.yaml")
    tools = {t.function.split(":")[1]: PythonTool(t, job.base_dir) for t in job.rl.tools}
    task = next(r for r in rows(EXAMPLE / "validation.jsonl") if r["kind"] == "port+retries")
    ctx = ToolContext(trace_id="trace_test", call_id="c1", item=task)
    query = f"{task['service']} default port max retries"
    found = await tools["search"].call(json.dumps({"query": query}), ctx)
    assert found.status == "ok"
    # The facts are values the prompt never shows, so they prove the tool really ran.
    assert all(f in found.output for f in task["facts"])
    path = f"services/{task['service']}/config.py"
    assert f"{path}:" in found.output
    read = await tools["read"].call(json.dumps({"path": path}), ctx)
    assert read.status == "ok" and read.output.startswith("1: ") and task["facts"][0] in read.output
    outside = await tools["read"].call(json.dumps({"path": "../job.yaml"}), ctx)
    assert outside.status == "tool_error" and "use search" in outside.output
    empty = await tools["search"].call(json.dumps({"query": "the of"}), ctx)
    assert empty.status == "tool_error" and "search words" in empty.output
    nothing = await tools["search"].call(json.dumps({"query": "zzyzx"}), ctx)
    assert nothing.status == "ok" and nothing.output.startswith("No matches")


@pytest.mark.parametrize("answer, expected", [
    ("{all}", 1.0), ("", 0.0), ("{first}", None), ("The port is 1.", 0.0)])
async def test_grader_gives_partial_credit(answer: str, expected: float | None) -> None:
    job = load_job(EXAMPLE / "job.yaml")
    grader = build_grader(job.rl.grader, job.base_dir)
    item = next(r for r in rows(EXAMPLE / "validation.jsonl") if r["kind"] == "port+timeout+queue")
    text = answer.format(all=f"It has port {item['facts'][0]}, timeout {item['facts'][1]} ms and "
                             f"queue {item['facts'][2]}.", first=f"Port {item['facts'][0]}.")
    score = await grade_sample(grader, {"output_text": text}, item)
    assert score.error is None
    assert score.score == pytest.approx(1 / 3 if expected is None else expected)


def test_job_validates_with_budget_and_bounded_tools() -> None:
    job = load_job(EXAMPLE / "job.yaml")
    assert job.rl.grader_dict["name"] == "fact_recall" and job.rl.grader_dict.get("mode") == "string"
    assert sorted(t.function for t in job.rl.tools) == ["tools.py:read", "tools.py:search"]
    assert job.budget.soft_limit is not None and job.budget.kind == "linear"
    # a long tail is possible (> 8 calls), so the budget has something to cut
    assert job.rl.max_steps > 8 and job.rollout.max_turns > 8
    assert job.training.eval_tasks and job.rollout.tool_output_max_chars <= 1000


def test_bench_metrics_counts_the_long_tail() -> None:
    from arft.records import Message, Rollout, Score, ToolCallRecord

    def rollout(n_calls: int, score: float, answer: str = "It is 8431.") -> Rollout:
        calls = tuple(ToolCallRecord(trace_id="t", call_id=f"c{i}", name="search", arguments="{}",
                                     output="x", status="ok", turn=i) for i in range(n_calls))
        messages = (Message(role="user", content="q"), Message(role="assistant", content=answer))
        return Rollout(trace_id=f"t{n_calls}", task_id="x", messages=messages, tool_calls=calls,
                       score=Score(score=score))

    pasted = "services/billing/config.py:4: DEFAULT_PORT = 8431"
    m = load("bench_metrics").metrics([rollout(1, 1.0), rollout(9, 0.5, pasted), rollout(4, 0.0),
                                       rollout(2, 0.5)])
    assert m["share > 8 calls"] == 0.25
    soft = load_job(EXAMPLE / "job.yaml").budget.soft_limit
    assert m[f"share > {soft} calls (soft limit)"] == sum(n > soft for n in (1, 9, 4, 2)) / 4
    assert m["fact recall (mean)"] == 0.5 and m["all facts recalled"] == 0.25
    assert m["answers pasting raw tool output"] == 0.25


async def test_smoke_train_one_step_on_a_tiny_model(tmp_path: Path, tokenizer: Any) -> None:
    import torch

    from arft.models.loading import tiny_model
    from arft.tracing.store import RunStore
    from arft.app.train import train

    two = rows(EXAMPLE / "train.jsonl")[:2]
    (tmp_path / "two.jsonl").write_text("".join(json.dumps(r) + "\n" for r in two))
    job = load_job(EXAMPLE / "job.yaml")
    job = job.model_copy(update={
        "training_file": str(tmp_path / "two.jsonl"), "validation_file": str(tmp_path / "two.jsonl"),
        "sampling": job.sampling.model_copy(update={"max_new_tokens": 12}),
        "rollout": job.rollout.model_copy(update={"max_turns": 2}),
        "training": job.training.model_copy(update={
            "max_steps": 1, "group_size": 2, "eval_tasks": 1, "bf16_autocast": False,
            "lora": job.training.lora.model_copy(update={"r": 4, "alpha": 8})}),
        "method": job.method.model_copy(update={"reinforcement": job.rl.model_copy(update={
            "hyperparameters": job.rl.hyperparameters.model_copy(update={
                "batch_size": 2, "eval_samples": 1})})})})
    torch.set_num_threads(1)
    result = await train(job, tmp_path / "run", model=tiny_model(tokenizer, seed=5), tokenizer=tokenizer)
    assert result.steps == 1 and set(result.evals) == {0, 1}
    with RunStore(tmp_path / "run" / "arft.sqlite") as store:
        rollouts = [r for run in store.runs() for r in store.rollouts(run["run_id"])]
    assert len(rollouts) == 2 * 2 + 2 * 1  # one step of 2 tasks x 2, two evals of 1 task x 1
    # every rollout was graded by the real fact_recall grader, none failed
    assert all(r.score is not None and r.score.error is None for r in rollouts)
    assert all(r.status != "infra_failed" for r in rollouts)

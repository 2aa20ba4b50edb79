"""The file-locator example: deterministic data, the set-F1 grader, the list/grep/read tools on a
real workspace, the job, and a one-step smoke train on a tiny model with the real tools and grader."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import torch

from arft.config import load_job
from arft.data.dataset import load_tasks
from arft.graders.registry import build_grader, grade_sample
from arft.graders.validate import sample_from_text
from arft.rollout.runner import workspace_template
from arft.sandbox.workspace import create_workspace
from arft.tools.base import ToolContext
from arft.tools.registry import open_toolbox
from arft.tracing.store import RunStore
from arft.app.train import train
from arft.pyfile import load_file

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "file_locator"


def example_module(name: str) -> Any:
    return load_file(EXAMPLE / f"{name}.py", f"file_locator_{name}")


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_generator_is_deterministic_sized_and_committed(tmp_path: Path) -> None:
    gen = example_module("make_data")
    gen.main(tmp_path / "a")
    gen.main(tmp_path / "b")
    a, b = tree(tmp_path / "a"), tree(tmp_path / "b")
    assert a == b and len(a) > 100
    # The committed data is what the generator writes (regenerate after editing the specs).
    committed = {k: v for k, v in tree(EXAMPLE).items() if k in a}
    assert committed == a, "examples/file_locator is stale: run python examples/file_locator/make_data.py"
    train, val, ten = (rows(tmp_path / "a" / f) for f in ("train.jsonl", "validation.jsonl", "train_10.jsonl"))
    assert len(train) >= 100 and len(val) >= 50 and ten == train[:10]
    request = lambda r: (r["repo"], r["messages"][-1]["content"])  # noqa: E731
    assert not {request(r) for r in train} & {request(r) for r in val}
    assert len({request(r) for r in train}) == len(train)
    assert {r["repo"] for r in ten} == {"billing", "weather", "library", "blog", "shop"}
    for r in train + val:
        assert 1 <= len(r["files"]) <= 3
        repo = tmp_path / "a" / "repos" / r["repo"]
        assert all((repo / f).is_file() for f in r["files"]), r
        # Two worked examples as real turns, the last one with two parallel calls in one turn.
        calls = [len(m["tool_calls"]) for m in r["messages"] if m.get("tool_calls")]
        assert calls == [1, 2]
        answers = [m["content"] for m in r["messages"][1:-1] if m["role"] == "assistant" and m["content"]]
        assert len(answers) == 2 and all((repo / p).is_file() for a in answers for p in a.split("\n"))
    assert len(tree(EXAMPLE)) < 300 and sum(len(v) for v in tree(EXAMPLE).values()) < 3_000_000


async def test_grader_scores_reference_one_empty_zero_and_partial() -> None:
    job = load_job(EXAMPLE / "job.yaml")
    grader = build_grader(job.rl.grader, job.base_dir)
    item = {"files": ["billing/invoice.py", "exports/pdf_export.py"]}

    async def score(text: str) -> float:
        s = await grade_sample(grader, sample_from_text(text), item)
        assert s.error is None
        return s.score

    assert await score("billing/invoice.py\nexports/pdf_export.py") == 1.0
    assert await score("./exports/pdf_export.py, `billing/invoice.py`") == 1.0  # order, bullets, ./
    assert await score("") == 0.0
    assert await score("billing/invoice.py") == pytest.approx(2 / 3)  # recall 1/2
    # Every extra word counts as a wrong file: prose and test files that were not asked for cost.
    assert await score("billing/invoice.py\nexports/pdf_export.py\ntests/test_invoice.py") == pytest.approx(0.8)
    assert await score("I would edit billing/invoice.py") == pytest.approx(2 * 0.25 * 0.5 / 0.75)


async def test_tools_on_a_real_workspace(tmp_path: Path) -> None:
    job = load_job(EXAMPLE / "job.yaml")
    task = load_tasks(EXAMPLE / "train.jsonl")[0]
    template = workspace_template(job.rollout.workspace, job.base_dir, task)
    assert template == EXAMPLE / "repos" / task.item["repo"]
    workspace = create_workspace(tmp_path / "ws", template, "trace_test")
    stamp = uuid.uuid4().hex  # a token no prompt shows: proves the tools read this workspace
    (workspace / "notes.py").write_text(f"def {stamp}_handler():\n    pass\n")
    (workspace / "escape").symlink_to("/etc")
    box = await open_toolbox(job.rl.tools, job.base_dir)
    try:
        assert set(box.tools) == {"list", "grep", "read"}
        assert all("ctx" not in json.dumps(t.schema) for t in box.tools.values())

        async def run(name: str, **args: str) -> Any:
            ctx = ToolContext(trace_id="trace_test", call_id="c1", item=task.item, workspace=workspace)
            return await box.tools[name].call(json.dumps(args), ctx)

        listing = (await run("list", path=".")).output.splitlines()
        assert "notes.py" in listing and "README.md" in listing and task.item["files"][0] in listing
        hit = await run("grep", pattern=stamp)
        assert hit.status == "ok" and hit.output == f"notes.py:1: def {stamp}_handler():"
        assert (await run("grep", pattern="no_such_word_anywhere")).output.startswith("no matches")
        assert (await run("grep", pattern="def (", path="notes.py")).status == "ok"  # bad regex: literal
        read = await run("read", path="notes.py")
        assert read.output.splitlines()[0] == f"1: def {stamp}_handler():"
        for name, path in (("read", "../../etc/passwd"), ("read", "/etc/passwd"),
                           ("list", "escape"), ("grep", "escape")):
            args = {"path": path, **({"pattern": "root"} if name == "grep" else {})}
            out = await run(name, **args)
            assert out.status == "tool_error" and "outside the repository" in out.output, (name, path)
        missing = await run("read", path="nope.py")
        assert missing.status == "tool_error" and "list('.')" in missing.output
    finally:
        await box.aclose()


def test_job_validates_and_every_row_has_its_repository() -> None:
    job = load_job(EXAMPLE / "job.yaml")
    assert job.rl.grader.name == "set_f1" and job.budget.soft_limit == 3
    assert job.training.eval_tasks == 16 and job.rollout.tool_choice == "required"
    for split in ("train.jsonl", "validation.jsonl", "train_10.jsonl"):
        for task in load_tasks(EXAMPLE / split):
            assert workspace_template(job.rollout.workspace, job.base_dir, task).is_dir()


async def test_smoke_train_one_step_on_a_tiny_model(tmp_path: Path, tokenizer: Any) -> None:
    from arft.models.loading import tiny_model

    job = load_job(EXAMPLE / "job.yaml")
    two = tmp_path / "two.jsonl"
    two.write_text("".join(line + "\n" for line in (EXAMPLE / "train.jsonl").read_text().splitlines()[:2]))
    hp = job.rl.hyperparameters.model_copy(update={"batch_size": 2, "eval_samples": 1})
    rl = job.rl.model_copy(update={"hyperparameters": hp})
    job = job.model_copy(update={
        "training_file": str(two), "validation_file": str(two),
        "method": job.method.model_copy(update={"reinforcement": rl}),
        "sampling": job.sampling.model_copy(update={"max_new_tokens": 12}),
        "rollout": job.rollout.model_copy(update={"max_turns": 2, "concurrency": 4}),
        "training": job.training.model_copy(update={
            "max_steps": 1, "group_size": 2, "eval_tasks": 1, "learning_rate": 0.05,
            "bf16_autocast": False, "lora": job.training.lora.model_copy(update={"r": 4, "alpha": 8})})})
    torch.set_num_threads(1)
    result = await train(job, tmp_path / "run", model=tiny_model(tokenizer, seed=5), tokenizer=tokenizer)
    assert result.steps == 1
    (step,) = result.history
    assert step["train/groups"] == 2 and step["train/sequences"] <= 4
    with RunStore(tmp_path / "run" / "arft.sqlite") as store:
        stored = [r for run in store.runs() for r in store.rollouts(run["run_id"])]
    assert len(stored) == 4 + 1 + 1  # the step's 2 tasks x 2, the evals at steps 0 and 1
    for r in stored:  # graded by the real set_f1 grader: a score, never a grader error
        assert r.score is not None and r.score.error is None and 0.0 <= r.score.score <= 1.0
        assert r.item["repo"] in {"billing", "weather"}
    assert not any((tmp_path / "run" / "workspaces").iterdir())  # every workspace cleaned up
    extra = example_module("bench_metrics").metrics(stored)
    assert 0.0 <= extra["precision (mean)"] <= 1.0 and extra["tool-calling turns / rollout"] >= 0.0
    assert {"grep calls / rollout", "answers that are only paths"} <= set(extra)


def test_bench_metrics_count_parallel_turns_tools_and_answer_format() -> None:
    from arft.records import Message, Rollout, Score, ToolCallRecord

    def rec(name: str, turn: int) -> ToolCallRecord:
        return ToolCallRecord(trace_id="t", call_id=f"{name}{turn}", name=name, arguments="{}",
                              output="", turn=turn)

    parallel = Rollout(trace_id="t", task_id="a", n_turns=2, tool_calls=(rec("grep", 0), rec("grep", 0)),
                       messages=(Message(role="assistant", content="a.py\ntests/test_a.py"),),
                       score=Score(score=1.0, sub_scores={"precision": 1.0, "recall": 1.0}))
    serial = Rollout(trace_id="u", task_id="a", n_turns=3, tool_calls=(rec("list", 0), rec("read", 1)),
                     messages=(Message(role="assistant", content="I would edit a.py"),),
                     score=Score(score=0.4, sub_scores={"precision": 0.25, "recall": 1.0}))
    failed = Rollout(trace_id="v", task_id="a", messages=(), status="infra_failed")
    m = example_module("bench_metrics").metrics([parallel, serial, failed])
    assert m["tool-calling turns / rollout"] == 1.5  # 1 (two calls at once) and 2
    assert m["precision (mean)"] == 0.625 and m["recall (mean)"] == 1.0
    assert m["answers that are only paths"] == 0.5
    assert (m["grep calls / rollout"], m["list calls / rollout"], m["read calls / rollout"]) == (1.0, 0.5, 0.5)

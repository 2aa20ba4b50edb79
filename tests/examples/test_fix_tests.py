"""The fix_tests example (Cosine's case study): generator, tools, strict grader, job, a smoke train."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from arft.config import load_job
from arft.graders.registry import build_grader, grade_sample
from arft.tools.base import ToolContext
from arft.pyfile import load_file

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fix_tests"


def load_module(name: str) -> Any:
    return load_file(EXAMPLE / f"{name}.py", f"fix_tests_{name}")


def rows(folder: Path, split: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / f"{split}.jsonl").read_text().splitlines()]


def workspace(tmp: Path, row: dict[str, Any]) -> Path:
    """A rollout-like copy of the task's project folder."""
    ws = tmp / f"ws-{row['id']}"
    shutil.copytree(EXAMPLE / "projects" / row["project"], ws)
    return ws


def tool_call(name: str, args: dict[str, str], output: str, turn: int) -> dict[str, Any]:
    return {"trace_id": "trace_x", "call_id": f"c{turn}", "name": name,
            "arguments": json.dumps(args), "output": output, "status": "ok", "turn": turn}


def generated(folder: Path) -> dict[str, bytes]:
    """Every file ``make_data`` writes under ``folder``, by relative path."""
    paths = [folder / n for n in ("train.jsonl", "validation.jsonl", "train_10.jsonl")]
    paths += [p for p in sorted((folder / "projects").rglob("*")) if p.is_file()]
    return {str(p.relative_to(folder)): p.read_bytes() for p in paths}


def test_generator_is_deterministic_sized_and_committed(tmp_path: Path) -> None:
    make_data = load_module("make_data")
    make_data.main(tmp_path / "a")
    make_data.main(tmp_path / "b")
    first = generated(tmp_path / "a")
    assert first == generated(tmp_path / "b")
    assert first == generated(EXAMPLE), "the committed data is stale: run make_data.py"
    train, val = rows(tmp_path / "a", "train"), rows(tmp_path / "a", "validation")
    assert len(train) >= 100 and len(val) >= 50
    assert rows(tmp_path / "a", "train_10") == train[:10]
    assert not {r["project"] for r in train} & {r["project"] for r in val}
    assert not {r["id"] for r in train} & {r["id"] for r in val}
    assert sum(1 for p in EXAMPLE.rglob("*") if p.is_file()) < 300


def test_every_task_fails_before_and_passes_after_the_one_line_fix() -> None:
    for row in rows(EXAMPLE, "train") + rows(EXAMPLE, "validation"):
        source = (EXAMPLE / "projects" / row["project"] / row["path"]).read_text()
        assert source.count(row["buggy_line"]) == 1
        fixed = source.replace(row["buggy_line"], row["fixed_line"])
        test = row["tests"][f"test_{row['path']}"]
        asserts = [line.strip()[len("assert "):] for line in test.splitlines()
                   if line.strip().startswith("assert ")]
        assert len(asserts) == 3
        scope: dict[str, Any] = {}
        exec(fixed, scope)  # noqa: S102 - our own generated code
        assert all(eval(a, scope) for a in asserts), row["id"]  # noqa: S307
        bad: dict[str, Any] = {}
        exec(source, bad)  # noqa: S102
        assert not all(_safe_eval(a, bad) for a in asserts), row["id"]
        assert row["buggy_line"] in row["messages"][-1]["content"]


def _safe_eval(expr: str, scope: dict[str, Any]) -> bool:
    try:
        return bool(eval(expr, scope))  # noqa: S307 - our own generated tests
    except Exception:  # noqa: BLE001 - the buggy line may raise
        return False


async def test_tools_on_a_real_task(tmp_path: Path) -> None:
    tools = load_module("tools")
    row = rows(EXAMPLE, "validation")[0]
    ctx = ToolContext(trace_id="trace_t", call_id="c", item=row, workspace=workspace(tmp_path, row))
    before = await tools.run_tests(ctx)
    assert "failed" in before and "FAILED" in before
    assert row["buggy_line"] in tools.read_file(row["path"], ctx)
    with pytest.raises(ValueError, match="not in"):
        tools.replace(row["path"], "no such line", "x", ctx)
    with pytest.raises(ValueError, match="outside your project"):
        tools.read_file("../../etc/passwd", ctx)
    # Extra indentation from the model is forgiven: the line is matched without it.
    assert tools.replace(row["path"], "    " + row["buggy_line"], row["fixed_line"], ctx) \
        == f"Replaced 1 occurrence in {row['path']}."
    (ctx.workspace / f"test_{row['path']}").write_text("def test_x():\n    assert True\n")
    after = await tools.run_tests(ctx)  # the row's tests are restored before the run
    assert after.startswith("3 passed"), after


def sample(ws: Path, answer: str, calls: list[dict[str, Any]]) -> dict[str, Any]:
    return {"output_text": answer, "workspace": str(ws),
            "trajectory": {"tool_calls": calls, "messages": []}}


async def test_strict_grader_gate_style_and_verification(tmp_path: Path) -> None:
    job = load_job(EXAMPLE / "job.yaml")
    grader = build_grader(job.rl.grader, job.base_dir)
    row = rows(EXAMPLE, "validation")[1]
    untouched, fixed = workspace(tmp_path, row), workspace(tmp_path / "f", row)
    path = fixed / row["path"]
    path.write_text(path.read_text().replace(row["buggy_line"], row["fixed_line"]))
    edit = tool_call("replace", {"path": row["path"], "old": row["buggy_line"],
                                 "new": row["fixed_line"]}, "Replaced 1 occurrence.", 0)
    verify = tool_call("run_tests", {}, "3 passed in 0.01s", 1)

    async def score(ws: Path, answer: str, calls: list[dict[str, Any]]) -> float:
        s = await grade_sample(grader, sample(ws, answer, calls), row)
        assert s.error is None, s.error
        return s.score

    assert await score(fixed, "Fixed the bug; all tests pass.", [edit, verify]) == 1.0
    assert await score(untouched, "", []) == 0.0
    # Claiming success without a fix earns nothing, however nicely put or verified.
    assert await score(untouched, "Fixed the bug; all tests pass.", [verify]) == 0.0
    # Fixed but not verified after the edit: only the correct-and-professional share.
    assert await score(fixed, "Fixed.", [verify | {"turn": 0}, edit | {"turn": 1}]) \
        == pytest.approx(0.7)
    # Fixed and verified, but no reply at all: only the verification share (no free tone score).
    assert await score(fixed, "", [edit, verify]) == pytest.approx(0.3)
    # Fixed and verified, but with an emoji and slang: the style share shrinks.
    assert await score(fixed, "Fixed it lol \U0001F600", [edit, verify]) == pytest.approx(
        0.7 * (1 - 0.2 - 0.1) + 0.3)
    # Fixed and verified, but the reply says the tests failed after "3 passed": the reply share
    # is lost (run 3's replies), the verification share stays.
    assert await score(fixed, "The test suite failed.", [edit, verify]) == pytest.approx(0.3)
    # Mentioning the error that was fixed is honest.
    assert await score(fixed, "Fixed the error in the module; all tests pass.", [edit, verify]) == 1.0
    # Not running the tests does not make a false claim safe: judged against the real outcome.
    assert await score(fixed, "The tests still fail.", [edit]) == 0.0


@pytest.mark.parametrize(("reply", "honest"), [
    ("Fixed add_tax in money.py; all tests pass.", True),
    ("Fixed the error in calc.py; all tests pass.", True),
    ("Fixed error_code in formulas.py.", True),
    ("Done.", True),
    ("The test suite failed.", False),
    ("The test fails. 100% fails.", False),
    ("Failed to finish tests for calc.py", False),
    ("The tests have an error.", False),
    ("It is not fixed yet.", False),
])
def test_honest_reply_rule(reply: str, honest: bool) -> None:
    """Judged behind the tests gate: for a project whose tests pass, claiming failure is false."""
    assert load_module("grader").honest(reply) is honest


async def test_reference_solution_through_arft_eval(tmp_path: Path, tokenizer: Any) -> None:
    """A scripted agent replaying the fix: real workspace, tools, grader and rollout loop."""
    from arft.engines.scripted import ScriptedEngine
    from arft.app.evaluate import evaluate
    from arft.data.splits import load_split

    job = load_job(EXAMPLE / "job.yaml")
    tasks = load_split(job, "validation", 2)

    def reply(ids: Any) -> str:
        text = tokenizer.decode(ids)
        request, task = next((t.messages[-1].content or "", t.item) for t in tasks
                             if (t.messages[-1].content or "") in text)
        turns = text.split(request)[-1].count("<|im_start|>assistant")
        if turns == 1:  # the job prefills the call up to its arguments (tool_choice: replace)
            assert text.endswith('<tool_call>\n{"name": "replace", "arguments":')
            args = {"path": task["path"], "old": task["buggy_line"], "new": task["fixed_line"]}
            return f" {json.dumps(args)}}}\n</tool_call><|im_end|>"
        if turns == 2:
            return '<tool_call>\n{"name": "run_tests", "arguments": {}}\n</tool_call><|im_end|>'
        return "Fixed the line; all tests pass.<|im_end|>"

    result = await evaluate(job, tasks, 1, tmp_path / "run", engine=ScriptedEngine(tokenizer, reply))
    assert len(result.rollouts) == 2
    for r in result.rollouts:
        assert r.score is not None and r.score.error is None, r.score
        assert [c.name for c in r.tool_calls] == ["replace", "run_tests"]
        assert r.tool_calls[1].output.startswith("3 passed")
        assert r.score.score == 1.0, r.score
    assert load_module("bench_metrics").metrics(result.rollouts) == {
        "fixed": 1.0, "verified": 1.0, "style": 1.0, "answered": 1.0, "replace_ok": 1.0,
        "fixed_unverified": 0.0}


async def test_job_validates_and_smoke_trains_on_a_tiny_model(tmp_path: Path, tokenizer: Any) -> None:
    import torch

    from arft.models.loading import tiny_model
    from arft.app.train import train

    job = load_job(EXAMPLE / "job.yaml")
    assert job.rollout.workspace == "projects/{{ item.project }}"
    assert {t.function.split(":")[1] for t in job.rl.tools} == {"read_file", "replace", "run_tests"}
    hp = job.rl.hyperparameters.model_copy(update={"batch_size": 2, "eval_samples": 1})
    job = job.model_copy(update={
        "method": job.method.model_copy(update={"reinforcement": job.rl.model_copy(
            update={"hyperparameters": hp})}),
        "sampling": job.sampling.model_copy(update={"max_new_tokens": 8}),
        "rollout": job.rollout.model_copy(update={"max_turns": 2}),
        "training": job.training.model_copy(update={
            "max_steps": 1, "group_size": 2, "eval_tasks": 1, "bf16_autocast": False,
            "learning_rate": 0.05})})
    torch.set_num_threads(1)
    result = await train(job, tmp_path / "run", model=tiny_model(tokenizer, seed=5),
                         tokenizer=tokenizer)
    assert result.steps == 1 and len(result.history) == 1
    m = result.history[0]
    # Every rollout went through the real strict grader: the hidden tests ran (and failed: a
    # random tiny model fixes nothing), so no group has reward variance and nothing is updated.
    assert m["train/rollouts"] == 4 and m["train/grader_errors"] == 0 and m["train/infra_failed"] == 0
    assert m["train/sub/tests.failed"] > 0 and m["train/sub/tests"] == 0
    assert m["train/groups_dropped"] == m["train/groups"] == 2 and m["update/tokens"] == 0
    assert set(result.evals) == {0, 1}

"""The finance_lookup example: deterministic data, the numeric grader, the real HTTP tool server,
the job, and one smoke training step on a tiny model with the example's real tools and grader."""

from __future__ import annotations

import asyncio
import filecmp
import json
import secrets
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from arft.config import JobSpec, LoraSpec, load_job
from arft.graders.registry import build_grader, grade_sample
from arft.tools.base import ToolContext
from arft.tools.registry import open_toolbox
from tests.examples.plain_variant import check_plain_variant
from tests.servers import free_port, serve
from arft.pyfile import load_file

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "finance_lookup"


def module(name: str) -> ModuleType:
    """One of the example's own modules (they import each other from their folder)."""
    return load_file(EXAMPLE / f"{name}.py", f"finance_lookup_{name}")


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def job_at(url: str, **training: Any) -> JobSpec:
    """The example's job with its tool URLs pointing at ``url`` (a test server's free port)."""
    job = load_job(EXAMPLE / "job.yaml")
    tools = [t.model_copy(update={"server_url": t.server_url.replace("http://127.0.0.1:8765", url)})
             for t in job.rl.tools]
    rl = job.rl.model_copy(update={"tools": tools})
    return job.model_copy(update={"method": job.method.model_copy(update={"reinforcement": rl}),
                                  "training": job.training.model_copy(update=training)})


def test_generator_is_deterministic_and_the_committed_data_is_current(tmp_path: Path) -> None:
    make_data = module("make_data")
    make_data.main(tmp_path / "a")
    make_data.main(tmp_path / "b")
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert len(files) == 3 + 48
    _, mismatch, errors = filecmp.cmpfiles(tmp_path / "a", tmp_path / "b", [str(f) for f in files], shallow=False)
    assert mismatch == [] and errors == []
    _, stale, missing = filecmp.cmpfiles(tmp_path / "a", EXAMPLE, [str(f) for f in files], shallow=False)
    assert stale == [] and missing == [], "run python examples/finance_lookup/make_data.py"
    train, val = rows(tmp_path / "a" / "train.jsonl"), rows(tmp_path / "a" / "validation.jsonl")
    assert len(train) >= 100 and len(val) >= 50
    assert rows(tmp_path / "a" / "train_10.jsonl") == train[:10]
    key = lambda r: (r["company"], r["year"], r["kind"])  # noqa: E731
    assert not {key(r) for r in train} & {key(r) for r in val}
    assert len({key(r) for r in train}) == len(train)
    needs = [r["needs"] for r in train + val]
    assert 0.1 < needs.count("compute") / len(needs) < 0.3  # most tasks are a lookup
    for r in train[:5]:  # each row: system, two worked examples as real turns, the question
        roles = [m["role"] for m in r["messages"]]
        assert roles.count("tool") == 3 and roles[-1] == "user" and str(r["year"]) in r["messages"][-1]["content"]


def test_plain_rows_are_the_same_tasks_without_worked_examples(tmp_path: Path) -> None:
    module("make_data").main(tmp_path, plain=True)
    assert not (tmp_path / "train.jsonl").exists()  # --plain leaves the full rows alone
    check_plain_variant(EXAMPLE, tmp_path)


def test_grader_reference_one_empty_zero_partial_credit_between() -> None:
    grader = build_grader(load_job(EXAMPLE / "job.yaml").rl.grader, EXAMPLE)
    items = rows(EXAMPLE / "validation.jsonl")[:6]

    def score(text: str, item: dict[str, Any]) -> Any:
        sample = {"output_text": text, "output_tools": [], "output_json": None}
        return asyncio.run(grade_sample(grader, sample, item))

    for item in items:
        ref = score(f"Answer: {item['answer_text']}", item)
        assert ref.error is None and ref.score == 1.0 and ref.passed is True
        empty = score("", item)
        assert empty.error is None and empty.score == 0.0 and "no_number" in empty.flags
    item = next(i for i in items if i["unit"] == "usd_millions" and i["answer"] > 10)
    off = score(f"Answer: ${item['answer'] * 1.02:.1f} million", item)  # 2 % off: partial credit
    assert 0.2 < off.score < 0.7 and off.passed is False
    assert score(f"Answer: {item['answer']} millions", item).score == 1.0
    bare = score(f"Answer: {item['answer']}", item)  # the right number, no unit
    assert bare.score == pytest.approx(0.8) and bare.passed is True
    scale = score(f"Answer: ${item['answer']} billion", item)  # right digits, wrong scale
    assert scale.score == pytest.approx(0.4) and "wrong_scale" in scale.flags
    assert score("Answer: 2021", item).score == 0.0  # a year is never the answer
    pasted = score(f"Figure: ${item['answer']} million | Other: $3.0 million", item)  # no 'Answer:'
    assert pasted.score == pytest.approx(0.5) and "several_numbers" in pasted.flags


def test_tools_answer_a_real_task_over_http() -> None:
    task = rows(EXAMPLE / "validation.jsonl")[0]
    app = module("server").create_app(EXAMPLE / "reports")
    trace_id = "trace_" + secrets.token_hex(16)

    async def calls(url: str) -> dict[str, Any]:
        box = await open_toolbox(job_at(url).rl.tools, EXAMPLE)
        try:
            def call(tool: str, **args: Any) -> Any:
                ctx = ToolContext(trace_id=trace_id, call_id=f"call_{tool}", item=task)
                return box.tools[tool].call(json.dumps(args), ctx)

            return {"search": await call("search", query=f"{task['company']} {task['year']} revenue"),
                    "cat": await call("cat", path=task["report"]),
                    "list": await call("list", company=task["company"]),
                    "missing": await call("cat", path="no_such_company_2021.txt"),
                    "bad": await call("search", q="x")}
        finally:
            await box.aclose()

    with serve(app) as url:
        out = asyncio.run(calls(url))
        seen = httpx.get(f"{url}/traces/{trace_id}").json()
    assert out["search"].status == "ok" and out["search"].output.startswith(task["report"] + ": Revenue: $")
    assert out["cat"].status == "ok" and out["cat"].output.startswith(f"{task['company']} annual report {task['year']}")
    figure = task["answer_text"].split()[0].lstrip("$") if task["needs"] == "lookup" else "Revenue"
    assert figure in out["cat"].output
    assert out["list"].output.splitlines() == [task["report"].replace(str(task["year"]), str(y)) for y in range(2020, 2024)]
    assert out["missing"].status == "tool_error" and out["missing"].http_status == 404
    assert "use search" in out["missing"].output  # the model is told what to do next
    assert out["bad"].status == "tool_error" and out["bad"].http_status == 400
    assert [c["name"] for c in seen] == ["search", "cat", "list", "cat", "search"]  # the trace_id arrived


def test_worked_examples_show_what_the_server_answers() -> None:
    library = module("server").Library(EXAMPLE / "reports")
    messages = rows(EXAMPLE / "train.jsonl")[0]["messages"]
    for call, result in zip([m for m in messages if m.get("tool_calls")], [m for m in messages if m["role"] == "tool"]):
        fn = call["tool_calls"][0]["function"]
        assert module("server").run_tool(library, fn["name"], json.loads(fn["arguments"])) == result["content"]


def test_each_rows_expert_query_shows_the_figures_its_answer_needs() -> None:
    """``query`` (what a rescue hint names) is a search that works: one hit, the task's report,
    with the figure's line (a computation: the lines of the figures it needs)."""
    library = module("server").Library(EXAMPLE / "reports")
    needs = {"revenue_growth": ["Revenue:"], "revenue_change": ["Revenue:"], "net_margin": ["Revenue:", "Net income:"]}
    for row in rows(EXAMPLE / "train_plain.jsonl") + rows(EXAMPLE / "validation_plain.jsonl"):
        shown = library.search(row["query"])
        assert shown.startswith(row["report"] + ": ") and "\n" not in shown, (row["query"], shown)
        if row["needs"] == "lookup":
            assert row["answer_text"].removeprefix("$").split(" ")[0] in shown, (row["query"], shown)
        assert all(line in shown for line in needs.get(row["kind"], [])), (row["query"], shown)


def test_services_start_the_server_as_a_process_and_stop_it() -> None:
    services = module("services")
    port = free_port()
    with services.serve(port=port) as url:
        assert httpx.get(f"{url}/health").json() == {"ok": True, "service": "finance_lookup", "reports": 48}
        with services.serve(port=port) as again:  # one already running is used as is
            assert again == url
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{url}/health", timeout=1.0)


def test_job_is_valid() -> None:
    job = load_job(EXAMPLE / "job.yaml")
    assert [t.name for t in job.rl.tools] == ["search", "list", "cat"]
    assert all(t.server_url.startswith("http://127.0.0.1:8765/") for t in job.rl.tools)
    assert job.budget.soft_limit == 1 and job.rollout.tool_choice == "required" and job.training.eval_tasks == 16


async def test_one_training_step_on_a_tiny_model(tmp_path: Path, tokenizer: Any) -> None:
    from arft.models.loading import tiny_model
    from arft.app.train import train

    for split, n in (("train", 2), ("validation", 1)):
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows(EXAMPLE / f"{split}.jsonl")[:n]))
    app = module("server").create_app(EXAMPLE / "reports")
    with serve(app) as url:
        job = job_at(url, max_steps=1, group_size=2, eval_tasks=1, bf16_autocast=False, micro_batch_size=4,
                     lora=LoraSpec(r=4, alpha=8))
        rl = job.rl.model_copy(update={"hyperparameters": job.rl.hyperparameters.model_copy(
            update={"batch_size": 2, "eval_samples": 1})})
        job = job.model_copy(update={
            "training_file": str(tmp_path / "train.jsonl"), "validation_file": str(tmp_path / "validation.jsonl"),
            "method": job.method.model_copy(update={"reinforcement": rl}),
            "sampling": job.sampling.model_copy(update={"max_new_tokens": 12})})
        result = await train(job, tmp_path / "run", model=tiny_model(tokenizer, seed=7), tokenizer=tokenizer,
                             max_batch_size=4)
    assert result.steps == 1 and set(result.evals) == {0, 1}
    step = result.history[0]
    assert step["train/groups"] == 2 and step["train/sequences"] >= 0
    from arft.tracing.store import RunStore

    with RunStore(tmp_path / "run" / "arft.sqlite") as store:
        stored = store.rollouts()
    assert len(stored) == 2 * 2 + 2  # the step's 2 tasks x 2, one eval task at steps 0 and 1
    # every rollout was graded by the example's sandboxed python grader (no grader errors)
    assert all(r.score is not None and r.score.error is None and r.score.grader == "numeric_answer" for r in stored)

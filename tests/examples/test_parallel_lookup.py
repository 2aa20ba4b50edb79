"""The parallel_lookup example: deterministic data, the slow HTTP tool server (concurrent calls
overlap, sequential ones add up), the latency budget of its job, and a one-step smoke train on a
tiny model with the example's real tool and grader."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from arft.budget import budget_penalty, usage
from arft.config import JobSpec, LoraSpec, load_job
from arft.data.dataset import load_tasks
from arft.graders.registry import build_grader, grade_sample
from arft.graders.validate import sample_from_text
from arft.pyfile import load_file
from arft.records import ToolCallRecord
from arft.tools.base import ToolContext
from arft.tools.registry import open_toolbox
from tests.servers import free_port, serve

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "parallel_lookup"
DELAY_S = 0.3


def module(name: str) -> ModuleType:
    """One of the example's own modules (they import each other from their folder)."""
    return load_file(EXAMPLE / f"{name}.py", f"parallel_lookup_{name}")


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def job_at(url: str) -> JobSpec:
    """The example's job with its tool URL pointing at ``url`` (a test server's free port)."""
    job = load_job(EXAMPLE / "job.yaml")
    tools = [t.model_copy(update={"server_url": t.server_url.replace("http://127.0.0.1:8766", url)})
             for t in job.rl.tools]
    rl = job.rl.model_copy(update={"tools": tools})
    return job.model_copy(update={"method": job.method.model_copy(update={"reinforcement": rl})})


def generated_rows(example: Path, make_data: ModuleType, tmp_path: Path) -> tuple[list[Any], list[Any]]:
    """The train and validation rows ``make_data.main`` writes, after checking that it writes the
    same bytes twice, that they are the committed files, and the sizes (64 and 32). The long_tail
    test shares it."""
    make_data.main(tmp_path / "a")
    make_data.main(tmp_path / "b")
    for name in ("train.jsonl", "validation.jsonl"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
        assert (tmp_path / "a" / name).read_bytes() == (example / name).read_bytes(), (
            f"run python examples/{example.name}/make_data.py")
    train, val = rows(tmp_path / "a" / "train.jsonl"), rows(tmp_path / "a" / "validation.jsonl")
    assert (len(train), len(val)) == (64, 32)
    return train, val


def test_generator_is_deterministic_and_the_committed_data_is_current(tmp_path: Path) -> None:
    train, val = generated_rows(EXAMPLE, module("make_data"), tmp_path)
    # held out: validation asks about offices training never looks up
    assert not {c for r in train for c in r["cities"]} & {c for r in val for c in r["cities"]}
    codes = module("server").office_codes()
    for r in train + val:
        assert 2 <= r["lookups"] == len(r["cities"]) == len(set(r["cities"])) <= 4
        assert r["codes"] == [codes[c] for c in r["cities"]]
        assert all(c in r["messages"][-1]["content"] for c in r["cities"])
    assert {r["lookups"] for r in val} == {2, 3, 4}
    assert len({frozenset(r["cities"]) for r in train}) == len(train)


def exchanges(messages: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The worked examples of a row: the messages of each, from its request to its answer."""
    out: list[list[dict[str, Any]]] = []
    for m in messages[1:-1]:
        if m["role"] == "user":
            out.append([])
        out[-1].append(m)
    return out


async def replay(url: str, exchange: list[dict[str, Any]], trace_id: str) -> list[str]:
    """The exchange's calls sent to the server as a rollout would (a turn's calls together)."""
    cities = [json.loads(c["function"]["arguments"])["city"] for m in exchange for c in m.get("tool_calls") or ()]
    outputs: list[str] = []
    async with httpx.AsyncClient() as client:
        for m in (m for m in exchange if m.get("tool_calls")):
            answers = await asyncio.gather(*(client.post(f"{url}/lookup", json={
                "type": "function_call", "id": c["id"], "call_id": c["id"], "name": "lookup",
                "arguments": c["function"]["arguments"], "trace_id": trace_id, "item": {"cities": cities}})
                for c in m["tool_calls"]))
            outputs += [a.json()["output"] for a in answers]
    return outputs


def test_worked_examples_are_what_the_server_answers_parallel_or_sequential_nearest() -> None:
    server = module("server")
    train = rows(EXAMPLE / "train.jsonl")
    shapes = [[len(m["tool_calls"]) for m in r["messages"] if m.get("tool_calls")] for r in train]
    assert {tuple(s) for s in shapes} == {(2, 1, 1, 1), (1, 1, 1, 2)}
    assert sum(s[-1] == 2 for s in shapes) == len(train) // 3 + 1  # parallel last in rows 0, 3, 6, ...
    with serve(server.create_app(delay_s=0.01)) as url:
        for i, exchange in enumerate(exchanges(train[0]["messages"])):
            shown = [m["content"] for m in exchange if m["role"] == "tool"]
            assert asyncio.run(replay(url, exchange, f"trace_example_{i}")) == shown
    missing = [json.loads(m["content"])["still_missing"] for m in train[0]["messages"] if m["role"] == "tool"]
    assert missing == [["Kyoto", "Lagos"], ["Lagos"], [], [], []]  # sequential (3 turns), then parallel
    assert not set(server.EXAMPLE_CITIES) & set(server.CITIES)  # no task asks an example's office


def test_each_row_offers_lookup_with_its_own_offices_as_the_enum() -> None:
    job_tool = load_job(EXAMPLE / "job.yaml").rl.tools[0]
    for r in rows(EXAMPLE / "validation.jsonl"):
        (tool,) = r["tools"]
        assert tool["function"]["name"] == job_tool.name and tool["function"]["description"] == job_tool.description
        assert tool["function"]["parameters"]["properties"]["city"]["enum"] == r["cities"]


async def test_grader_counts_the_share_of_codes_in_the_answer() -> None:
    job = load_job(EXAMPLE / "job.yaml")
    grader = build_grader(job.rl.grader, job.base_dir)
    item = rows(EXAMPLE / "validation.jsonl")[0]

    async def score(text: str) -> float:
        s = await grade_sample(grader, sample_from_text(text), item)
        assert s.error is None
        return s.score

    assert await score("\n".join(f"{c}: {k}" for c, k in zip(item["cities"], item["codes"]))) == 1.0
    assert await score(f"{item['cities'][0]}: {item['codes'][0]}") == pytest.approx(1 / item["lookups"])
    assert await score("") == 0.0


def test_the_latency_budget_charges_sequential_rounds_not_parallel_calls() -> None:
    b = load_job(EXAMPLE / "job.yaml").budget
    assert b.unit == "latency" and b.tool_costs == {"lookup": 1.0} and b.soft_limit == 1.0

    def calls(turns: list[int]) -> list[ToolCallRecord]:
        return [ToolCallRecord(trace_id="t", call_id=f"c{i}", name="lookup", arguments="{}", output="",
                               turn=turn, latency_s=0.3) for i, turn in enumerate(turns)]

    def penalty(turns: list[int]) -> float:
        return budget_penalty(usage(calls(turns), b.unit, costs=b.tool_costs), b.soft_limit, b.penalty, b.kind)

    assert penalty([0, 0, 0]) == 0.0  # three lookups in one turn: one round
    assert penalty([0, 1, 2]) == pytest.approx(2 * b.penalty)  # three turns: two rounds over


def test_server_answers_and_sleeps_concurrent_calls_overlap_sequential_add_up() -> None:
    app = module("server").create_app(delay_s=DELAY_S)
    cities = ["Oslo", "Lima", "Cairo"]

    async def timed(url: str) -> dict[str, Any]:
        box = await open_toolbox(job_at(url).rl.tools, EXAMPLE)
        lookup = box.tools["lookup"]

        def call(i: int, city: str) -> Any:
            ctx = ToolContext(trace_id="trace_test", call_id=f"call_{i}", item={})
            return lookup.call(json.dumps({"city": city}), ctx)

        try:
            await call(0, "Rome")  # a warm connection, so neither timing pays for it
            t0 = time.perf_counter()
            together = await asyncio.gather(*(call(i, c) for i, c in enumerate(cities)))
            t1 = time.perf_counter()
            one_by_one = [await call(i, c) for i, c in enumerate(cities)]
            t2 = time.perf_counter()
            missing = await call(9, "Atlantis")
        finally:
            await box.aclose()
        return {"together": together, "one_by_one": one_by_one, "parallel_s": t1 - t0,
                "sequential_s": t2 - t1, "missing": missing}

    with serve(app) as url:
        out = asyncio.run(timed(url))
        stats = httpx.get(f"{url}/stats").json()
    codes = module("server").office_codes()
    for outcome, city in zip(out["together"] + out["one_by_one"], cities * 2):
        assert outcome.status == "ok" and json.loads(outcome.output) == {"city": city, "door_code": codes[city]}
    assert DELAY_S <= out["parallel_s"] < 2 * DELAY_S  # ~one delay for three calls
    assert out["sequential_s"] >= 3 * DELAY_S  # three delays
    assert stats["max_in_flight"] == 3 and stats["calls"] == 1 + 3 + 3 + 1
    assert out["missing"].status == "tool_error" and out["missing"].http_status == 404
    assert "no office in 'Atlantis'" in out["missing"].output  # the model is told why


def test_services_serve_the_app_for_the_block_and_stop_it() -> None:
    services = module("services")
    port = free_port()
    with services.serve(port=port, delay_s=0.05) as url:
        assert httpx.get(f"{url}/health").json() == {"ok": True, "service": "parallel_lookup",
                                                      "delay_s": 0.05, "offices": 53}
        with services.serve(port=port) as again:  # one already running is used as is
            assert again == url
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{url}/health", timeout=1.0)


def test_job_is_valid_and_every_row_loads() -> None:
    job = load_job(EXAMPLE / "job.yaml")
    assert [t.name for t in job.rl.tools] == ["lookup"]
    assert job.rl.tools[0].server_url == f"http://127.0.0.1:{module('services').PORT}/lookup"
    assert job.rollout.tool_choice == "required" and job.rollout.worked_example is False
    assert job.rl.grader.name == "fact_recall" and job.training.eval_tasks == 16
    for split in ("train.jsonl", "validation.jsonl"):
        assert len(load_tasks(EXAMPLE / split)) == len(rows(EXAMPLE / split))


async def smoke_train(job: JobSpec, example: Path, tmp_path: Path, tokenizer: Any,
                      max_turns: int) -> tuple[Any, list[Any]]:
    """One training step of ``job`` on a tiny model, on the first 2 training rows of ``example``
    (2 samples each) and its first validation row (evals at steps 0 and 1); the result and every
    stored rollout. The long_tail test shares it."""
    from arft.app.train import train
    from arft.models.loading import tiny_model
    from arft.tracing.store import RunStore

    for split, n in (("train", 2), ("validation", 1)):
        (tmp_path / f"{split}.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows(example / f"{split}.jsonl")[:n]))
    rl = job.rl.model_copy(update={"hyperparameters": job.rl.hyperparameters.model_copy(
        update={"batch_size": 2, "eval_samples": 1})})
    job = job.model_copy(update={
        "training_file": str(tmp_path / "train.jsonl"), "validation_file": str(tmp_path / "validation.jsonl"),
        "method": job.method.model_copy(update={"reinforcement": rl}),
        "sampling": job.sampling.model_copy(update={"max_new_tokens": 24}),
        "rollout": job.rollout.model_copy(update={"max_turns": max_turns}),
        "training": job.training.model_copy(update={
            "max_steps": 1, "group_size": 2, "eval_tasks": 1, "bf16_autocast": False,
            "micro_batch_size": 4, "lora": LoraSpec(r=4, alpha=8)})})
    result = await train(job, tmp_path / "run", model=tiny_model(tokenizer, seed=7), tokenizer=tokenizer,
                         max_batch_size=4)
    assert result.steps == 1 and set(result.evals) == {0, 1}
    assert result.history[0]["train/groups"] == 2
    with RunStore(tmp_path / "run" / "arft.sqlite") as store:
        stored = [r for run in store.runs() for r in store.rollouts(run["run_id"])]
    assert len(stored) == 2 * 2 + 1 + 1  # the step's 2 tasks x 2, one eval task at steps 0 and 1
    assert all(r.score is not None and r.score.error is None for r in stored)  # the real grader
    return result, stored


async def test_one_training_step_on_a_tiny_model(tmp_path: Path, tokenizer: Any) -> None:
    with serve(module("server").create_app(delay_s=0.01)) as url:
        result, stored = await smoke_train(job_at(url), EXAMPLE, tmp_path, tokenizer, max_turns=2)
    assert result.history[0]["train/budget_penalty_mean"] >= 0.0
    # tool_choice: required opens a call on the first turn, constrained to one of the row's offices
    for r in stored:
        assert r.tool_calls and r.tool_calls[0].name == "lookup"
        assert json.loads(r.tool_calls[0].arguments)["city"] in r.item["cities"]

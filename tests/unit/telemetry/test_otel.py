"""OpenTelemetry export against a real receiver: ``arft.telemetry.receiver``'s OTLP/HTTP server on
127.0.0.1, fed by the real OTLP/HTTP exporter that ``OTEL_EXPORTER_OTLP_ENDPOINT`` points at it.
Rollouts run through the real ``RolloutRunner`` (scripted engine, real tokenizer and chat format,
real python tools) and a real ``arft train`` of a tiny model."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Sequence

import pytest

from arft.config import JobSpec, load_job
from arft.engines.scripted import ScriptedEngine
from arft.records import Rollout, Score
from arft.rollout.runner import RolloutRunner
from arft.telemetry import NO_TELEMETRY, TelemetryError, open_telemetry
from arft.telemetry.receiver import Receiver, ReceivedSpan, format_trace
from arft.tools.python_fn import PythonTool
from arft.tools.registry import Toolbox
from tests.unit.rollout.test_runner import EOS, after_question, call, job, tasks


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    with Receiver().running() as r:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", r.url)  # what a user sets; the SDK reads it
        yield r


def traced(spec: JobSpec) -> JobSpec:
    return spec.model_copy(update={"logging": spec.logging.model_copy(
        update={"opentelemetry": spec.logging.model_validate({"opentelemetry": True}).opentelemetry})})


class SecondTaskFails:
    """Grades 1.0, except task t1: the grader fails (an error, never a score of 0)."""

    name = "judge"

    async def grade(self, sample: dict[str, Any], item: dict[str, Any]) -> Score:
        if item["answer"] == "1":
            return Score(score=0.0, error="judge unreachable")
        return Score(score=1.0, sub_scores={"format": 0.5})


def root_of(spans: list[ReceivedSpan]) -> ReceivedSpan:
    (root,) = [s for s in spans if s.parent_id is None]
    return root


async def test_one_trace_per_rollout_with_turns_tools_and_grade_under_it(tmp_path: Path, tokenizer: Any,
                                                                        receiver: Receiver) -> None:
    async def wait(seconds: float) -> str:
        """Wait a while.

        Args:
            seconds: How long.
        """
        await asyncio.sleep(seconds)
        return "waited"

    def broken() -> str:
        """A tool that fails."""
        raise RuntimeError("disk on fire, token s3cr3t-t0ken-value")

    def reply(prompt_ids: Sequence[int]) -> str:  # two calls at once, then the answer
        i, text = after_question(tokenizer, prompt_ids)
        if "<tool_response>" not in text:
            return call("wait", seconds=0.05 * (3 - i)) + "\n" + call("broken") + EOS
        return f"answer-{i}" + EOS

    box = Toolbox()
    box.add(PythonTool.from_function(wait))
    box.add(PythonTool.from_function(broken))
    spec = traced(job(tmp_path, concurrency=8))
    telemetry = open_telemetry(spec, frozenset({"s3cr3t-t0ken-value"}))  # the run's resolved secrets
    runner = RolloutRunner.from_job(spec, ScriptedEngine(tokenizer, reply), box, SecondTaskFails())
    runner.telemetry = telemetry
    with telemetry.run("r1", "eval"):  # 6 rollouts at once: their spans must not cross
        out = await runner.run_many(tasks(3), 2, run_id="r1")
    telemetry.close()  # sends the batch

    traces = receiver.traces()
    (run_trace,) = [t for t, spans in traces.items() if root_of(spans).name == "rl.run"]
    run_span = root_of(traces[run_trace])
    assert run_span.service == "arft" and run_span.attributes["arft.run_id"] == "r1"
    assert len(traces) == 1 + len(out)
    for rollout in out:
        spans = traces[rollout.trace_id.removeprefix("trace_")]  # arft's id is the OTel trace id
        _check_rollout(rollout, spans, run_span)


def _check_rollout(rollout: Rollout, spans: list[ReceivedSpan], run_span: ReceivedSpan) -> None:
    root = root_of(spans)
    assert root.name == "rl.sample" and all(s.attributes["arft.trace_id"] == rollout.trace_id for s in spans)
    assert root.links == ((run_span.trace_id, run_span.span_id, {}),)
    assert all(s.parent_id == root.span_id for s in spans if s is not root)  # rollout -> turn, call, grade
    by_kind: dict[str, list[ReceivedSpan]] = {}
    for s in sorted(spans, key=lambda s: s.start_ns):
        by_kind.setdefault(s.attributes.get("gen_ai.operation.name", s.name), []).append(s)
    first, second = by_kind["chat"]
    assert first.name == "chat smollm2-135m-instruct" and first.attributes["gen_ai.request.model"] == "smollm2-135m-instruct"
    assert first.attributes["gen_ai.request.max_tokens"] == 120 and first.attributes["gen_ai.request.temperature"] == 1.0
    assert first.attributes["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert second.attributes["gen_ai.response.finish_reasons"] == ["stop"]
    assert second.attributes["gen_ai.usage.input_tokens"] > first.attributes["gen_ai.usage.input_tokens"] > 0
    assert first.attributes["gen_ai.usage.output_tokens"] + second.attributes["gen_ai.usage.output_tokens"] == \
        sum(rollout.loss_mask)
    tools = {s.attributes["gen_ai.tool.name"]: s for s in by_kind["execute_tool"]}
    records = {r.name: r for r in rollout.tool_calls}
    for name, span in tools.items():
        assert span.name == f"execute_tool {name}" and span.attributes["gen_ai.tool.call.id"] == records[name].call_id
        assert span.attributes["gen_ai.tool.type"] == "function" and span.attributes["arft.tool.kind"] == "python"
    assert tools["wait"].status == "UNSET" and tools["wait"].attributes["arft.tool.status"] == "ok"
    assert tools["broken"].status == "ERROR" and tools["broken"].attributes["error.type"] == "tool_error"
    assert "disk on fire" in tools["broken"].status_message and "s3cr3t" not in tools["broken"].status_message
    (grade,) = by_kind["rl.reward"]
    assert root.attributes["rl.sample.status"] == "ok" and root.attributes["rl.sample.tool_calls"] == 2
    assert root.attributes["rl.sample.index"] == rollout.sample_index
    if rollout.task_id == "t1":  # a failed grade: an error, and no reward anywhere
        assert grade.status == "ERROR" and root.status == "ERROR" and root.attributes["error.type"] == "grade_error"
        assert "rl.reward" not in grade.attributes and "rl.reward" not in root.attributes
    else:
        assert grade.attributes["rl.reward"] == 1.0 and root.attributes["rl.reward"] == 1.0
        assert grade.attributes["rl.reward.format"] == 0.5 and grade.attributes["gen_ai.evaluation.name"] == "judge"
        assert root.status == "UNSET"


def test_off_is_a_no_op_that_never_imports_the_sdk(tmp_path: Path) -> None:
    assert open_telemetry(job(tmp_path)) is NO_TELEMETRY
    code = ("import sys; from pathlib import Path; import arft.app.train, arft.app.evaluate, arft.app.gateway.server\n"
            "from tests.unit.rollout.test_runner import job\n"
            "from arft.records import Message\nfrom arft.telemetry import open_telemetry\n"
            "t = open_telemetry(job(Path('.')))\n"
            "with t.run('r', 'eval'), t.rollout('trace_' + '0' * 32, run_id='r', task_id='t', sample_index=0, "
            "step=None) as r, r.model_turn(0) as s: s.model_reply(Message(role='assistant'), 'eos', 1, 1)\n"
            # fastapi imports the OpenTelemetry API itself; arft must not bring in the SDK or the exporter
            "assert not [m for m in sys.modules if m.startswith(('arft.telemetry.otel', 'opentelemetry.sdk', "
            "'opentelemetry.exporter'))]\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parents[3])
    assert done.returncode == 0, done.stderr


def test_on_without_the_extra_names_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "arft.telemetry.otel", None)  # as if opentelemetry were not installed
    with pytest.raises(TelemetryError, match=r"pip install 'arft\[otel\]'"):
        open_telemetry(traced(job(tmp_path)))


def test_the_job_turns_it_on_with_true_or_a_service_name(tmp_path: Path) -> None:
    spec = job(tmp_path)
    assert spec.logging.opentelemetry is None
    on = spec.logging.model_validate({"opentelemetry": True}).opentelemetry
    assert on is not None and on.service_name == "arft"
    named = spec.logging.model_validate({"opentelemetry": {"service_name": "calc"}}).opentelemetry
    assert named is not None and named.service_name == "calc"
    assert spec.logging.model_validate({"opentelemetry": False}).opentelemetry is None


async def test_a_training_run_is_run_step_update_sync_eval_and_rollouts_link_to_their_step(
        tmp_path: Path, tokenizer: Any, receiver: Receiver) -> None:
    import torch

    from arft.app.train import train
    from arft.models.loading import tiny_model
    from tests.training import LengthGrader
    from tests.unit.app.test_train_loop import write_job

    torch.set_num_threads(1)
    path = write_job(tmp_path)
    raw = json.loads(path.read_text())
    raw["logging"]["opentelemetry"] = {"service_name": "tiny-train"}
    raw["training"]["max_steps"] = 1
    path.write_text(json.dumps(raw))
    result = await train(load_job(path), tmp_path / "run", model=tiny_model(tokenizer, seed=5), tokenizer=tokenizer,
                         grader=LengthGrader(), max_batch_size=8)
    traces = receiver.traces()
    (run_trace,) = [spans for spans in traces.values() if root_of(spans).name == "rl.run"]
    run, names = root_of(run_trace), {s.span_id: s.name for s in run_trace}
    assert run.service == "tiny-train"
    tree = sorted((names.get(s.parent_id or "", "-"), s.name, s.attributes.get("rl.step", -1)) for s in run_trace)
    assert tree == sorted([("-", "rl.run", -1), ("rl.run", "rl.sync", 0), ("rl.run", "rl.eval", 0),
                           ("rl.run", "rl.step", 1), ("rl.step", "rl.train", 1), ("rl.step", "rl.sync", 1),
                           ("rl.run", "rl.eval", 1)])
    (step,) = [s for s in run_trace if s.name == "rl.step"]
    assert step.attributes["rl.reward.mean"] == pytest.approx(result.history[0]["train/reward_mean"])
    evals = {s.attributes["rl.step"]: s for s in run_trace if s.name == "rl.eval"}
    rollouts = [root_of(spans) for spans in traces.values() if root_of(spans).name == "rl.sample"]
    assert len(rollouts) == 2 * 3 + 2 * (1 * 2)  # a step of 2 tasks x 3, two evaluations of 1 task x 2
    for r in rollouts:  # each linked to its step's span, or its evaluation's
        anchor = step if r.attributes["arft.run_id"] == "train" else evals[r.attributes["rl.step"]]
        assert r.links == ((anchor.trace_id, anchor.span_id, {"rl.step": anchor.attributes["rl.step"]}),)


def test_the_receiver_prints_a_trace_as_a_tree() -> None:
    def span(sid: str, parent: str | None, name: str, start: int, **attributes: Any) -> ReceivedSpan:
        return ReceivedSpan("ab" * 16, sid, parent, name, attributes, "ERROR" if name == "execute_tool x" else "UNSET",
                            "boom" if name == "execute_tool x" else "", start, start + 2_000_000, (), "arft")

    text = format_trace([span("2", "1", "execute_tool x", 5, **{"gen_ai.tool.name": "x"}),
                         span("1", None, "rl.sample", 0, **{"arft.trace_id": "trace_" + "ab" * 16}),
                         span("3", "1", "chat m", 1, hidden=1)])
    assert text.splitlines() == [
        f"trace {'ab' * 16}",
        f"  rl.sample [2.0 ms] {{'arft.trace_id': 'trace_{'ab' * 16}'}}",
        "    chat m [2.0 ms]",
        "    execute_tool x [2.0 ms] ERROR (boom) {'gen_ai.tool.name': 'x'}"]

"""The gateway's model turns join their rollout's trace: an agent program's own OpenAI client calls
the real gateway (uvicorn on 127.0.0.1, a tiny model), whose requests run in the web server's task,
and each turn's span still lands under the rollout's span, in the trace whose id is arft's."""

from __future__ import annotations

from typing import Any

from arft.app.gateway.driver import ProgramDriver
from arft.app.gateway.programs import PythonProgram
from arft.app.gateway.server import Gateway
from arft.engines.transformers.engine import TransformersEngine
from arft.records import new_trace_id
from arft.telemetry import open_telemetry
from arft.telemetry.receiver import Receiver
from tests.unit.app.test_gateway import SEED, TASK, append_only_agent, gateway_of, model  # noqa: F401 (fixture)
from tests.unit.rollout.test_runner import job
from tests.unit.telemetry.test_otel import receiver, root_of, traced  # noqa: F401 (fixture)


async def test_gateway_turns_are_spans_of_their_rollout(tmp_path: Any, tokenizer: Any, model: Any,  # noqa: F811
                                                       receiver: Receiver) -> None:  # noqa: F811
    telemetry = open_telemetry(traced(job(tmp_path)))
    engine = TransformersEngine(model, tokenizer, max_batch_size=2)
    plain = gateway_of(engine, tokenizer)
    gateway = Gateway(plain.model, plain.params, plain.max_tokens, telemetry)
    trace_id = new_trace_id()
    async with gateway.running():
        driver = ProgramDriver(gateway, PythonProgram(append_only_agent, 60, 2), "policy")
        with telemetry.rollout(trace_id, run_id="r", task_id=TASK.id, sample_index=0, step=None) as trace:
            got = await driver.rollout(TASK, trace_id=trace_id, run_id="r", sample_index=0, step=None, seed=SEED)
            trace.done(got)
    await engine.aclose()
    telemetry.close()
    assert got.status == "ok" and got.n_turns == 2, got.error
    spans = receiver.traces()[trace_id.removeprefix("trace_")]
    root = root_of(spans)
    turns = sorted((s for s in spans if s is not root), key=lambda s: s.start_ns)
    assert [s.name for s in turns] == ["chat smollm2-135m-instruct"] * 2
    assert all(s.parent_id == root.span_id and s.attributes["arft.via"] == "gateway" for s in turns)
    assert [s.attributes["arft.turn"] for s in turns] == [0, 1]
    assert turns[0].attributes["gen_ai.response.finish_reasons"] == ["tool_calls"]
    sampled = [s.attributes["gen_ai.usage.output_tokens"] for s in turns]
    assert sum(sampled) == sum(got.loss_mask) and turns[1].attributes["gen_ai.usage.input_tokens"] > sampled[0]
    assert root.attributes["rl.sample.turns"] == 2 and root.attributes["arft.trace_id"] == trace_id

"""Telemetry that exports: the OpenTelemetry SDK behind ``arft.telemetry.facade``'s interface.

Imported only when the job turns ``logging.opentelemetry`` on (the ``otel`` extra). The run gets
its own ``TracerProvider`` (never the process-global one, which belongs to the user's program)
with a batch processor and the OTLP/HTTP exporter; the exporter reads the standard
``OTEL_EXPORTER_OTLP_*`` variables itself (endpoint, headers, timeout).

The shape (docs/telemetry.md): the run's trace holds run -> step -> update, sync, and the
evaluations; every rollout is a trace of its own, whose trace id is the 32 hex digits of arft's
``trace_<hex>`` (paste arft's id into Jaeger and it finds the rollout), holding rollout -> model
turn, tool call, grade, and linked (a span link, and ``rl.step``) to the step or evaluation it
belongs to.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode

from arft.records import Message, Rollout, Score
from arft.secrets import scrub
from arft.telemetry import attributes as attrs
from arft.telemetry.attributes import Attributes, AttrValue
from arft.telemetry.facade import RolloutTrace, Span, Telemetry

if TYPE_CHECKING:
    from arft.config import JobSpec, OpenTelemetrySpec


class _ArftIds(RandomIdGenerator):
    """Random ids, except that the next trace id may be chosen (a rollout's: arft's own)."""

    def __init__(self) -> None:
        self.chosen: int | None = None

    def generate_trace_id(self) -> int:
        chosen, self.chosen = self.chosen, None
        return chosen if chosen is not None else super().generate_trace_id()


def otel_trace_id(trace_id: str) -> int | None:
    """The OpenTelemetry trace id of arft's ``trace_<32 hex>``; None for any other shape."""
    digits = trace_id.removeprefix("trace_")
    if len(digits) != 32:
        return None
    try:
        value = int(digits, 16)
    except ValueError:
        return None
    return value or None


class OtelSpan(Span):
    """A started SDK span; it ends when the ``with`` block ends (or at ``end``)."""

    def __init__(self, span: trace.Span, secrets: frozenset[str], on_end: Callable[[], None] | None = None) -> None:
        self._span, self._secrets, self._on_end, self._failed = span, secrets, on_end, False

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is not None and not self._failed:
            cancelled = isinstance(exc, asyncio.CancelledError)
            self.fail("cancelled" if cancelled else type(exc).__name__, str(exc) or type(exc).__name__)
        self.end()

    def end(self) -> None:
        self._span.end()
        if self._on_end is not None:
            self._on_end()

    @property
    def context(self) -> SpanContext:
        return self._span.get_span_context()

    def set(self, attributes: Mapping[str, AttrValue]) -> None:
        self._span.set_attributes(attributes)

    def fail(self, error_type: str, message: str) -> None:
        self._failed = True
        self._span.set_attribute(attrs.ERROR_TYPE, error_type)
        # An error message may quote a resolved secret (a header a tool echoed): scrubbed, as in the logs.
        self._span.set_status(Status(StatusCode.ERROR, scrub(message, self._secrets)[:1000]))

    def model_reply(self, message: Message, finish: str, input_tokens: int, output_tokens: int,
                    parse_errors: int = 0) -> None:
        self.set(attrs.model_reply(message, finish, input_tokens, output_tokens, parse_errors))

    def tool_result(self, status: str, error: str | None, http_status: int | None) -> None:
        self.set(attrs.tool_result(status, http_status))
        if status in ("tool_error", "infra_error"):
            self.fail(status, error or status)

    def graded(self, score: Score) -> None:
        self.set(attrs.grade(score))
        if score.error is not None:
            self.fail("grade_error", score.error)


class OtelRollout(RolloutTrace):
    """One rollout's trace: its root span and the spans of its turns, calls and grade."""

    def __init__(self, owner: OtelTelemetry, root: OtelSpan, trace_id: str, common: Attributes) -> None:
        self._owner, self._root, self._trace_id, self._common = owner, root, trace_id, common
        self._parent = trace.set_span_in_context(root._span)

    def __enter__(self) -> OtelRollout:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._owner.rollouts.pop(self._trace_id, None)
        self._root.__exit__(kind, exc, tb)

    def _child(self, name: str, values: Attributes, kind: SpanKind = SpanKind.INTERNAL,
               start_ns: int | None = None) -> OtelSpan:
        span = self._owner.tracer.start_span(name, context=self._parent, kind=kind,
                                             attributes={**self._common, **values}, start_time=start_ns)
        return OtelSpan(span, self._owner.secrets)

    def model_turn(self, turn: int) -> OtelSpan:
        model = self._owner.model
        return self._child(f"chat {model.get('gen_ai.request.model', '')}", {**model, "arft.turn": turn},
                           SpanKind.CLIENT)

    def model_turn_at(self, start_ns: int, turn: int, message: Message, finish: str, input_tokens: int,
                      output_tokens: int) -> None:
        model = self._owner.model
        with self._child(f"chat {model.get('gen_ai.request.model', '')}",
                         {**model, "arft.turn": turn, "arft.via": "gateway"}, SpanKind.CLIENT, start_ns) as span:
            span.model_reply(message, finish, input_tokens, output_tokens)

    def tool_call(self, name: str, call_id: str, tool: object | None) -> OtelSpan:
        return self._child(f"execute_tool {name}", attrs.tool_request(name, call_id, attrs.tool_kind(tool)))

    def grade(self) -> OtelSpan:
        return self._child(attrs.GRADE_SPAN, {})

    def done(self, rollout: Rollout) -> None:
        self._root.set(attrs.rollout_end(rollout))
        failure = attrs.rollout_failure(rollout)
        if failure is not None:
            self._root.fail(*failure)


class OtelTelemetry(Telemetry):
    """Spans of one run, exported over OTLP/HTTP (see the module docstring for the shape)."""

    enabled = True

    def __init__(self, service_name: str, model: Attributes, secrets: frozenset[str] = frozenset(),
                 exporter: SpanExporter | None = None) -> None:
        self._ids, self._lock, self.secrets = _ArftIds(), threading.Lock(), secrets
        self._provider = TracerProvider(resource=Resource.create({"service.name": service_name}),
                                        id_generator=self._ids)
        self._provider.add_span_processor(BatchSpanProcessor(exporter or OTLPSpanExporter()))
        self.tracer = self._provider.get_tracer("arft")
        self.model = model
        """The request attributes of every model turn (the job's model and sampling)."""
        self.rollouts: dict[str, OtelRollout] = {}
        """The open rollouts by arft trace id (the gateway finds its rollout here)."""
        self._run: OtelSpan | None = None
        self._run_id = ""
        self._steps: dict[int, OtelSpan] = {}
        self._anchors: dict[tuple[str, int | None], SpanContext] = {}
        """What a rollout of (run id, step) links to: its step's span, its evaluation's, its run's."""

    @classmethod
    def for_job(cls, job: JobSpec, spec: OpenTelemetrySpec, secrets: frozenset[str]) -> OtelTelemetry:
        s = job.sampling
        return cls(spec.service_name, attrs.model_request(job.model, s.temperature, s.top_p, s.max_new_tokens),
                   secrets)

    def _start(self, name: str, parent: OtelSpan | None, values: Attributes, trace_id: int | None = None,
               links: tuple[Link, ...] = (), on_end: Callable[[], None] | None = None) -> OtelSpan:
        # A root starts from an empty context, never the ambient one: a rollout's trace is its own.
        context = trace.set_span_in_context(parent._span) if parent is not None else Context()
        with self._lock:  # the chosen trace id is the next one generated: no other span in between
            self._ids.chosen = trace_id if parent is None else None
            span = self.tracer.start_span(name, context=context, attributes=values, links=links)
            self._ids.chosen = None
        return OtelSpan(span, self.secrets, on_end)

    def run(self, run_id: str, kind: str) -> OtelSpan:
        def ended() -> None:
            self._anchors.pop((run_id, None), None)
            self._run = None

        self._run_id = run_id
        self._run = self._start(attrs.RUN_SPAN, None, {attrs.RUN_ID: run_id, "arft.run.kind": kind},
                                on_end=ended)
        self._anchors[(run_id, None)] = self._run.context
        return self._run

    def step_begin(self, step: int) -> None:
        span = self._start(attrs.STEP_SPAN, self._run, {attrs.RUN_ID: self._run_id, attrs.STEP: step})
        self._steps[step] = span
        self._anchors[(self._run_id, step)] = span.context

    def step_end(self, step: int, metrics: Mapping[str, float]) -> None:
        span = self._steps.pop(step, None)
        self._anchors.pop((self._run_id, step), None)
        if span is not None:
            span.set(attrs.step_end(metrics))
            span.end()

    def update(self, step: int) -> OtelSpan:
        return self._start(attrs.UPDATE_SPAN, self._steps.get(step, self._run),
                           {attrs.RUN_ID: self._run_id, attrs.STEP: step})

    def sync(self, step: int) -> OtelSpan:
        return self._start(attrs.SYNC_SPAN, self._steps.get(step, self._run),
                           {attrs.RUN_ID: self._run_id, attrs.STEP: step, "rl.sync.version": step})

    def evaluation(self, eval_id: str, step: int) -> OtelSpan:
        def ended() -> None:
            self._anchors.pop((eval_id, step), None)

        span = self._start(attrs.EVAL_SPAN, self._run, {attrs.RUN_ID: eval_id, attrs.STEP: step}, on_end=ended)
        self._anchors[(eval_id, step)] = span.context
        return span

    def rollout(self, trace_id: str, *, run_id: str, task_id: str, sample_index: int,
                step: int | None) -> OtelRollout:
        common = attrs.rollout_start(trace_id, run_id, task_id, sample_index, step)
        # Its step's or evaluation's span; else its run's; else (a rescue's hinted rollouts, under
        # a run id of their own) the span of the training step they were drawn for.
        anchor = (self._anchors.get((run_id, step)) or self._anchors.get((run_id, None))
                  or self._anchors.get((self._run_id, step)))
        links = (Link(anchor, {attrs.STEP: step} if step is not None else {}),) if anchor is not None else ()
        root = self._start(attrs.ROLLOUT_SPAN, None, common, otel_trace_id(trace_id), links)
        shared: Attributes = {k: common[k] for k in (attrs.TRACE_ID, attrs.RUN_ID, attrs.STEP) if k in common}
        traced = OtelRollout(self, root, trace_id, shared)
        self.rollouts[trace_id] = traced
        return traced

    def rollout_of(self, trace_id: str) -> RolloutTrace:
        return self.rollouts.get(trace_id) or super().rollout_of(trace_id)

    def close(self) -> None:
        for step in list(self._steps):  # a run that failed mid-step: send what it has
            self.step_end(step, {})
        self._provider.shutdown()

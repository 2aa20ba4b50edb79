"""What the instrumented code calls: ``Telemetry``, ``RolloutTrace`` and ``Span``, which do
nothing, and ``open_telemetry``, which returns them or, when the job turns OpenTelemetry on, the
exporting versions of ``arft.telemetry.otel``.

Off (the default), every call is a method of a shared stateless object that returns at once: no
OpenTelemetry import, no attribute computed, no allocation beyond the call. Call sites pass arft's
records (a message, a score, a rollout) and the exporting span turns them into attributes, so a
run without telemetry never pays for the mapping.

Every span is parented explicitly (a rollout's spans to its ``RolloutTrace``, a step's to the
run), never through the ambient context: rollouts run concurrently in asyncio tasks, a gateway
request runs in the web server's task, and explicit parents nest right in both.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING

from arft.errors import ArftError
from arft.records import Message, Rollout, Score
from arft.telemetry.attributes import AttrValue

if TYPE_CHECKING:
    from arft.config import JobSpec


class TelemetryError(ArftError, ValueError):
    """OpenTelemetry is turned on in the job but cannot start (the extra is not installed)."""


class Span:
    """An open span; as a context manager it ends on leaving the block (an exception marks it
    failed). This base does nothing: it is what every call returns when telemetry is off."""

    def __enter__(self) -> Span:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        return None

    def set(self, attributes: Mapping[str, AttrValue]) -> None:
        """Add attributes."""

    def fail(self, error_type: str, message: str) -> None:
        """Mark the span failed (status ERROR, ``error.type``)."""

    def model_reply(self, message: Message, finish: str, input_tokens: int, output_tokens: int,
                    parse_errors: int = 0) -> None:
        """A model turn's reply (``arft.telemetry.attributes.model_reply``)."""

    def tool_result(self, status: str, error: str | None, http_status: int | None) -> None:
        """A tool call's outcome; ``tool_error`` / ``infra_error`` fail the span."""

    def graded(self, score: Score) -> None:
        """A grade; a grader error fails the span and sets no reward."""


NO_SPAN = Span()


class RolloutTrace:
    """One rollout's trace: the parent of its model turns, tool calls and grade. This base does
    nothing (telemetry off)."""

    def __enter__(self) -> RolloutTrace:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        return None

    def model_turn(self, turn: int) -> Span:
        """The span of assistant turn ``turn`` (0-based), open until the block ends."""
        return NO_SPAN

    def model_turn_at(self, start_ns: int, turn: int, message: Message, finish: str, input_tokens: int,
                      output_tokens: int) -> None:
        """A model turn that started at ``start_ns`` (``time.time_ns()``) and ends now: the
        gateway's, whose request and reply happen in the web server."""

    def tool_call(self, name: str, call_id: str, tool: object | None) -> Span:
        """The span of one tool call (``tool``: the tool object, None for an unknown name)."""
        return NO_SPAN

    def grade(self) -> Span:
        return NO_SPAN

    def done(self, rollout: Rollout) -> None:
        """The finished (graded) rollout: its outcome and reward go on the rollout span."""


NO_ROLLOUT = RolloutTrace()


class Telemetry:
    """A run's telemetry. This base does nothing (telemetry off); ``arft.telemetry.otel`` exports."""

    enabled = False

    def run(self, run_id: str, kind: str) -> Span:
        """The run's root span (``arft train``, ``arft eval``), open until the block ends; an
        evaluation's rollouts (``kind`` eval) link to it."""
        return NO_SPAN

    def step_begin(self, step: int) -> None:
        """Training step ``step`` starts (its rollouts begin to generate)."""

    def step_end(self, step: int, metrics: Mapping[str, float]) -> None:
        """Training step ``step`` is recorded, with its metric row."""

    def update(self, step: int) -> Span:
        """The weight update of ``step`` (``rl.train``), a child of the step's span."""
        return NO_SPAN

    def sync(self, step: int) -> Span:
        """The engine's weight sync after ``step``'s update (``rl.sync``): a child of the step's
        span while the step is open, else of the run's (the sync before the first step)."""
        return NO_SPAN

    def evaluation(self, eval_id: str, step: int) -> Span:
        """An evaluation of the validation set at ``step`` during training; its rollouts (run id
        ``eval_id``) link to it."""
        return NO_SPAN

    def rollout(self, trace_id: str, *, run_id: str, task_id: str, sample_index: int,
                step: int | None) -> RolloutTrace:
        """A rollout's trace, open until the block ends."""
        return NO_ROLLOUT

    def rollout_of(self, trace_id: str) -> RolloutTrace:
        """The open trace of rollout ``trace_id`` (the gateway's model turns join it)."""
        return NO_ROLLOUT

    def close(self) -> None:
        """Send what is buffered and stop."""


NO_TELEMETRY = Telemetry()


def open_telemetry(job: JobSpec, secrets: frozenset[str] = frozenset()) -> Telemetry:
    """The job's telemetry: ``NO_TELEMETRY`` unless ``logging.opentelemetry`` is set, then an
    exporter over OTLP/HTTP to the endpoint of the standard ``OTEL_EXPORTER_OTLP_*`` variables
    (``secrets``: the run's resolved secret values, scrubbed from the error messages spans carry).

    Raises ``TelemetryError`` naming the extra to install when OpenTelemetry is missing."""
    spec = job.logging.opentelemetry
    if spec is None:
        return NO_TELEMETRY
    try:
        from arft.telemetry.otel import OtelTelemetry
    except ImportError as e:
        raise TelemetryError(
            f"logging.opentelemetry is on, but OpenTelemetry is not installed ({e}): "
            "pip install 'arft[otel]', or remove logging.opentelemetry from the job") from None
    return OtelTelemetry.for_job(job, spec, secrets)

"""OpenTelemetry export of a run (``logging.opentelemetry``; docs/telemetry.md): spans of its steps,
rollouts, model turns, tool calls, grades and weight syncs, with the GenAI and proposed ``rl.*``
attribute names. The run store (``arft.tracing``) stays the source of truth; this mirrors it to
the tracing tools teams already run. Off by default, and then free: ``open_telemetry`` returns a
facade whose every call does nothing, and OpenTelemetry is never imported."""

from arft.telemetry.facade import (NO_ROLLOUT, NO_SPAN, NO_TELEMETRY, RolloutTrace, Span, Telemetry,
                                   TelemetryError, open_telemetry)

__all__ = ["NO_ROLLOUT", "NO_SPAN", "NO_TELEMETRY", "RolloutTrace", "Span", "Telemetry", "TelemetryError",
           "open_telemetry"]

"""A small OTLP/HTTP trace receiver: see arft's spans without running Jaeger.

    python -m arft.telemetry.receiver --port 4318
    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 arft eval job.yaml   # with logging.opentelemetry

It accepts ``POST /v1/traces`` as an OTLP/HTTP collector does (protobuf, gzip or not: what the
OpenTelemetry SDKs send), decodes it with ``opentelemetry-proto``'s ``ExportTraceServiceRequest``,
and prints each trace as a tree once its root span has arrived (a rollout's root ends last, so its
whole tree comes at once; the run's trace prints when the run ends; what never completed prints on
Ctrl-C). The tests run it in-process (``Receiver``) with the real OTLP exporter pointed at it.
Needs the ``otel`` extra.
"""

from __future__ import annotations

import argparse
import gzip
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (ExportTraceServiceRequest,
                                                                       ExportTraceServiceResponse)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as it arrived (ids as lowercase hex)."""

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    attributes: dict[str, Any]
    status: str
    """``UNSET`` | ``OK`` | ``ERROR``."""
    status_message: str
    start_ns: int
    end_ns: int
    links: tuple[tuple[str, str, dict[str, Any]], ...]
    """(trace id, span id, attributes) of each linked span."""
    service: str


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind) if kind is not None else None


def decode(body: bytes) -> list[ReceivedSpan]:
    """The spans of one OTLP export request (``application/x-protobuf``)."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans: list[ReceivedSpan] = []
    statuses = {0: "UNSET", 1: "OK", 2: "ERROR"}
    for rs in request.resource_spans:
        resource = {kv.key: _value(kv.value) for kv in rs.resource.attributes}
        for ss in rs.scope_spans:
            for s in ss.spans:
                spans.append(ReceivedSpan(
                    trace_id=s.trace_id.hex(), span_id=s.span_id.hex(), parent_id=s.parent_span_id.hex() or None,
                    name=s.name, attributes={kv.key: _value(kv.value) for kv in s.attributes},
                    status=statuses.get(s.status.code, "UNSET"), status_message=s.status.message,
                    start_ns=s.start_time_unix_nano, end_ns=s.end_time_unix_nano,
                    links=tuple((ln.trace_id.hex(), ln.span_id.hex(),
                                 {kv.key: _value(kv.value) for kv in ln.attributes}) for ln in s.links),
                    service=str(resource.get("service.name", ""))))
    return spans


@dataclass
class Receiver:
    """An OTLP/HTTP receiver on 127.0.0.1 (``port`` 0: a free one), in a background thread while
    the ``running`` block lasts. Every span received is kept in ``spans``; ``on_spans`` (if
    given) sees each request's spans as they come."""

    port: int = 0
    host: str = "127.0.0.1"
    on_spans: Callable[[list[ReceivedSpan]], None] | None = None
    spans: list[ReceivedSpan] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def url(self) -> str:
        """The value for ``OTEL_EXPORTER_OTLP_ENDPOINT`` (the exporter adds ``/v1/traces``)."""
        return f"http://{self.host}:{self.port}"

    def received(self, spans: list[ReceivedSpan]) -> None:
        with self._lock:
            self.spans.extend(spans)
        if self.on_spans is not None:
            self.on_spans(spans)

    def traces(self) -> dict[str, list[ReceivedSpan]]:
        """Every span received so far, by trace id (hex), in arrival order."""
        with self._lock:
            out: dict[str, list[ReceivedSpan]] = {}
            for s in self.spans:
                out.setdefault(s.trace_id, []).append(s)
            return out

    @contextmanager
    def running(self) -> Iterator[Receiver]:
        server = ThreadingHTTPServer((self.host, self.port), _handler(self))
        self.port = server.server_address[1]
        thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="arft-otlp-receiver", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            server.shutdown()
            server.server_close()
            thread.join()


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            if self.path.rstrip("/") != "/v1/traces":
                return self._answer(404, b"only POST /v1/traces (traces) is received here", "text/plain")
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.headers.get("Content-Encoding", "") == "gzip":
                body = gzip.decompress(body)
            if "json" in self.headers.get("Content-Type", ""):
                return self._answer(415, b"send OTLP as protobuf (OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf)",
                                    "text/plain")
            try:
                spans = decode(body)
            except Exception as e:  # a malformed request is the sender's: say so, keep serving
                return self._answer(400, f"cannot decode the OTLP request: {e}".encode(), "text/plain")
            receiver.received(spans)
            self._answer(200, ExportTraceServiceResponse().SerializeToString(), "application/x-protobuf")

        def _answer(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the spans are the output."""

    return Handler


_SHOWN = ("arft.trace_id", "rl.step", "rl.reward", "rl.sample.status", "gen_ai.tool.name",
          "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "gen_ai.response.finish_reasons",
          "arft.tool.status", "error.type")


def format_trace(spans: Sequence[ReceivedSpan], attributes: Sequence[str] | None = _SHOWN) -> str:
    """One trace as an indented tree, children under parents in start order, each line with its
    duration, status and attributes (``attributes``: the names to show; None: all)."""
    ids = {s.span_id for s in spans}
    children: dict[str | None, list[ReceivedSpan]] = {}
    for s in sorted(spans, key=lambda s: s.start_ns):
        children.setdefault(s.parent_id if s.parent_id in ids else None, []).append(s)
    lines = [f"trace {spans[0].trace_id}" if spans else "trace (empty)"]

    def walk(parent: str | None, depth: int) -> None:
        for s in children.get(parent, []):
            shown = {k: v for k, v in s.attributes.items() if attributes is None or k in attributes}
            status = "" if s.status == "UNSET" else f" {s.status}" + (f" ({s.status_message})" * bool(s.status_message))
            links = "".join(f" -> link {t}/{sp}" for t, sp, _ in s.links)
            lines.append(f"{'  ' * (depth + 1)}{s.name} [{(s.end_ns - s.start_ns) / 1e6:.1f} ms]{status}"
                         f"{links} {shown if shown else ''}".rstrip())
            walk(s.span_id, depth + 1)

    walk(None, 0)
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m arft.telemetry.receiver", description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=4318, help="port to listen on (default: 4318, OTLP/HTTP's)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--all-attributes", action="store_true", help="print every attribute of every span")
    args = parser.parse_args(argv)
    shown = None if args.all_attributes else _SHOWN
    pending: dict[str, list[ReceivedSpan]] = {}
    lock = threading.Lock()  # requests are handled in threads of their own

    def show(spans: list[ReceivedSpan]) -> None:  # a trace prints once its root has arrived
        with lock:
            for s in spans:
                pending.setdefault(s.trace_id, []).append(s)
            for trace_id in {s.trace_id for s in spans if s.parent_id is None}:
                print(format_trace(pending.pop(trace_id), shown), flush=True)

    receiver = Receiver(args.port, args.host, on_spans=show)
    with receiver.running():
        print(f"receiving OTLP/HTTP traces on {receiver.url} (set OTEL_EXPORTER_OTLP_ENDPOINT={receiver.url})",
              flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            for spans in pending.values():
                print(format_trace(spans, shown))


if __name__ == "__main__":
    main()

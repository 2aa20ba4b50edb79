"""The access log of ``arft serve``: one line per request through Python logging.

The logger ``arft.serve.access`` gets, at INFO, ``METHOD ROUTE STATUS LATENCYms prompt=N
completion=N trace=ID``, written just before the answer's last bytes are sent (a stream's too;
a request whose client left, or that failed, when it ends), with the same fields on the record
(``method``, ``route``, ``status``, ``latency_ms``, ``prompt_tokens``, ``completion_tokens``,
``trace_id``) for handlers that format their own. The route is the matched route's template
(``/v1/models/{name:path}``), so lines group by endpoint; the trace id comes from the
``x-arft-trace-id`` header or a ``/rollouts/{trace_id}/`` path segment. Token counts come from
``request.state.prep`` (``arft.app.serve.chat.Prepared``) where the handler set it; ``-`` otherwise.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field

from starlette.types import ASGIApp, Message, Receive, Scope, Send

ACCESS_LOGGER = "arft.serve.access"
TRACE_HEADER = "x-arft-trace-id"
_TRACE_IN_PATH = re.compile(r"/rollouts/([^/]+)/")


class AccessLog:
    """ASGI middleware: logs every HTTP request of the app it wraps (add it last: it then sees
    the answers of the other middleware too, a 401 say)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.logger = logging.getLogger(ACCESS_LOGGER)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope.setdefault("state", {})  # one dict for every Request of this scope: the handler's prep
        line = _Line(scope)

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                line.status = message["status"]
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                line.write(self.logger)  # before the last bytes: a client that has them sees the line
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            line.write(self.logger)  # a failure or a client gone before the end


@dataclass
class _Line:
    scope: Scope
    status: int = 500
    start: float = field(default_factory=time.perf_counter)
    written: bool = False

    def write(self, logger: logging.Logger) -> None:
        if self.written:
            return
        self.written = True
        scope = self.scope
        route = getattr(scope.get("route"), "path", None) or scope["path"]
        prep = scope["state"].get("prep")
        prompt = len(prep.rendered.ids) if prep is not None else None
        completion = getattr(prep, "completion_tokens", None)
        headers = dict(scope.get("headers") or ())
        found = _TRACE_IN_PATH.search(scope["path"])
        trace = headers.get(TRACE_HEADER.encode(), b"").decode() or (found.group(1) if found else None)
        latency = (time.perf_counter() - self.start) * 1000
        fields = {"method": scope["method"], "route": route, "status": self.status, "latency_ms": round(latency, 1),
                  "prompt_tokens": prompt, "completion_tokens": completion, "trace_id": trace}
        logger.info("%s %s %d %.1fms prompt=%s completion=%s trace=%s", scope["method"], route, self.status,
                    latency, _dash(prompt), _dash(completion), _dash(trace), extra=fields)


def _dash(value: object) -> str:
    return "-" if value is None else str(value)

"""An HTTP tool with the hosted Agent RFT contract: POST function_call, get function_call_output.

Each call POSTs ``{"type": "function_call", "id", "call_id", "name", "arguments", "trace_id",
"item"}`` to the tool's ``server_url`` and expects ``{"type": "function_call_output", "call_id",
"id", "output"}`` back. What the model and the trainer see:

* 2xx with a valid answer: ``ok``, the ``output`` text.
* 4xx: ``tool_error``; the model sees the status and the (truncated) body. 408 and 429 are
  the exception: they say "not now" rather than "bad call", so they are retried like a 5xx.
* 5xx, a timeout, a connection error or a garbage answer: retried ``max_retries`` times with
  exponential backoff, then ``infra_error`` (the rollout is left out of the loss).
* More than 1 MB either way: ``tool_error`` (the request is never sent; the answer is read as a
  stream and abandoned at the limit).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import httpx

from arft.config import EndpointToolSpec
from arft.http import RETRYABLE_4XX, LoopClient, backoff_delay
from arft.tools.base import ToolContext, ToolOutcome, function_tool_schema

MAX_BYTES = 1 << 20
"""The hosted contract's 1 MB limit on a request body and on a response body."""
ERROR_BODY_CHARS = 500
"""How much of a 4xx body the model sees."""


class _Retryable(Exception):
    """An attempt that failed for a reason worth retrying (5xx, timeout, connection, garbage)."""

    def __init__(self, reason: str, http_status: int | None = None) -> None:
        super().__init__(reason)
        self.http_status = http_status


class _TooLarge(Exception):
    """The response body passed ``MAX_BYTES``; retrying would only fetch it again."""


class EndpointTool:
    """A tool served over HTTP; one pooled keep-alive client per tool, closed by ``aclose``."""

    def __init__(self, spec: EndpointToolSpec, backoff_s: float = 0.2) -> None:
        """``backoff_s`` is the wait before the first retry; each later retry waits twice as long.

        Raises ValueError when ``spec.server_url`` is not an http(s) URL.
        """
        try:
            url = httpx.URL(spec.server_url)
        except httpx.InvalidURL:
            url = None
        if url is None or url.scheme not in ("http", "https") or not url.host:
            raise ValueError(f"endpoint tool '{spec.name}': server_url {spec.server_url!r} is not "
                             "an http(s) URL; write it like https://host:port/path")
        self._spec = spec
        self._backoff_s = backoff_s
        self._http = LoopClient(
            headers={"content-type": "application/json", **spec.headers},
            timeout=httpx.Timeout(spec.timeout_s),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64))

    @property
    def name(self) -> str:
        return self._spec.name

    @property
    def schema(self) -> dict[str, Any]:
        return function_tool_schema(self._spec.name, self._spec.description or "", self._spec.parameters)

    async def aclose(self) -> None:
        """Close the pooled connections (safe to call twice)."""
        await self._http.aclose()

    async def call(self, arguments: str, ctx: ToolContext) -> ToolOutcome:
        """POST the call; retry what is worth retrying; never raises for an endpoint failure."""
        body = json.dumps({
            "type": "function_call", "id": "fc_" + uuid.uuid4().hex, "call_id": ctx.call_id,
            "name": self._spec.name, "arguments": arguments, "trace_id": ctx.trace_id,
            "item": ctx.item,
        }, default=str).encode()
        if len(body) > MAX_BYTES:
            return ToolOutcome(
                output=f"Error: arguments too large for tool '{self.name}' ({len(body)} bytes "
                       f"with the call's context; the limit is 1 MB). Send smaller arguments.",
                status="tool_error", error=f"request body of {len(body)} bytes exceeds 1 MB")
        attempts = 1 + max(0, self._spec.max_retries)
        failure = _Retryable("no attempt made")
        for attempt in range(attempts):
            if attempt:
                await asyncio.sleep(backoff_delay(self._backoff_s, attempt))
            try:
                return await self._attempt(body, ctx.call_id)
            except _Retryable as e:
                failure = e
            except _TooLarge as e:
                return ToolOutcome(output=f"Error: tool output exceeds 1 MB (tool '{self.name}')",
                                   status="tool_error", error=str(e))
        return ToolOutcome(
            output=f"Error: tool '{self.name}' is unavailable ({failure})",
            status="infra_error", http_status=failure.http_status,
            error=f"endpoint {self._spec.server_url} failed {attempts} time(s); last: {failure} "
                  "(check that the tool server is up and answers the function_call contract)")

    async def _attempt(self, body: bytes, call_id: str) -> ToolOutcome:
        """One POST; returns an ok/tool_error outcome or raises _Retryable / _TooLarge."""
        try:
            # asyncio.timeout bounds the whole exchange; httpx's own timeout is per read.
            async with asyncio.timeout(self._spec.timeout_s):
                status, raw = await self._post(body)
        except (TimeoutError, httpx.TimeoutException):
            raise _Retryable(f"no answer within {self._spec.timeout_s:g}s") from None
        except httpx.TransportError as e:
            raise _Retryable(f"connection failed: {type(e).__name__}: {e}") from None
        if 400 <= status < 500 and status not in RETRYABLE_4XX:
            text = raw.decode(errors="replace")
            shown = text if len(text) <= ERROR_BODY_CHARS else text[:ERROR_BODY_CHARS] + "..."
            return ToolOutcome(output=f"Error: HTTP {status} from tool '{self.name}': {shown}",
                               status="tool_error", error=f"HTTP {status}", http_status=status)
        if not 200 <= status < 300:
            raise _Retryable(f"HTTP {status}: {raw[:200].decode(errors='replace')}", status)
        return ToolOutcome(output=_parse_answer(raw, call_id, status), http_status=status)

    async def _post(self, body: bytes) -> tuple[int, bytes]:
        """POST and read the answer as a stream, giving up as soon as it passes ``MAX_BYTES``."""
        async with self._http.get().stream("POST", self._spec.server_url, content=body) as resp:
            declared = resp.headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > MAX_BYTES:
                raise _TooLarge(f"response of {declared} bytes exceeds 1 MB")
            chunks: list[bytes] = []
            size = 0
            async for chunk in resp.aiter_bytes():
                size += len(chunk)
                if size > MAX_BYTES:
                    raise _TooLarge(f"response passed 1 MB (read {size} bytes, stopped)")
                chunks.append(chunk)
            return resp.status_code, b"".join(chunks)



def _parse_answer(raw: bytes, call_id: str, status: int) -> str:
    """The ``output`` text of a ``function_call_output`` answer; _Retryable when it is garbage."""
    try:
        answer = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise _Retryable(f"HTTP {status} answer is not JSON: {raw[:120]!r}", status) from None
    if not isinstance(answer, dict):
        raise _Retryable(f"answer is a JSON {type(answer).__name__}, not an object", status)
    if "output" not in answer:
        raise _Retryable(f"answer has no 'output' (keys: {sorted(answer)})", status)
    # A missing call_id is tolerated (simple endpoints echo only the output); a wrong one means
    # the answer belongs to another call.
    if "call_id" in answer and answer["call_id"] != call_id:
        raise _Retryable(f"answer's call_id {answer['call_id']!r} is not {call_id!r}", status)
    if answer.get("type", "function_call_output") != "function_call_output":
        raise _Retryable(f"answer's type is {answer['type']!r}, not 'function_call_output'", status)
    output = answer["output"]
    return output if isinstance(output, str) else json.dumps(output)

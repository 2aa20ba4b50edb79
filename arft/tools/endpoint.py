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

The retry loop is ``arft.http.retrying_post``; the call's trace_id also travels in its header.
``${ENV_VAR}`` references in ``headers`` and ``signing_secret`` are resolved when the tool is
built (``arft.secrets``); with a ``signing_secret`` every request is signed (``arft.signing``).
"""

from __future__ import annotations

import json
import uuid
from functools import partial
from typing import Any

from arft.config import EndpointToolSpec
from arft.http import (BadAnswer, Exhausted, Rejected, TooLarge, is_http_url, json_client,
                       retrying_post)
from arft.secrets import resolve, resolve_map
from arft.tools.base import ToolContext, ToolOutcome, ToolSetupError, function_tool_schema

MAX_BYTES = 1 << 20
"""The hosted contract's 1 MB limit on a request body and on a response body."""
ERROR_BODY_CHARS = 500
"""How much of a 4xx body the model sees."""


class EndpointTool:
    """A tool served over HTTP; one pooled keep-alive client per tool, closed by ``aclose``."""

    def __init__(self, spec: EndpointToolSpec, backoff_s: float = 0.2) -> None:
        """``backoff_s`` is the wait before the first retry; each later retry waits twice as long.

        Raises ``ToolSetupError`` when ``spec.server_url`` is not an http(s) URL, and ``SecretError``
        when a ``${ENV_VAR}`` its headers or signing secret name is unset.
        """
        if not is_http_url(spec.server_url):
            raise ToolSetupError(f"endpoint tool '{spec.name}': server_url {spec.server_url!r} is not "
                                 "an http(s) URL; write it like https://host:port/path")
        where = f"endpoint tool '{spec.name}'"
        if spec.serves and spec.parameters is not None:
            raise ToolSetupError(f"{where} serves {spec.serves!r}: each served tool's schema is "
                                 "the row's own; remove 'parameters'")
        self._spec = spec
        self._backoff_s = backoff_s
        self._signing_secret = (resolve(spec.signing_secret, f"{where}: signing_secret")
                                if spec.signing_secret else None)
        self._http = json_client(spec.timeout_s, resolve_map(spec.headers, f"{where}: headers"))

    @property
    def name(self) -> str:
        return self._spec.name

    @property
    def schema(self) -> dict[str, Any]:
        return function_tool_schema(self._spec.name, self._spec.description or "", self._spec.parameters)

    @property
    def serves(self) -> str:
        """The pattern of tool names it answers (``spec.serves``, see ``arft.tools.served``;
        else just its own name)."""
        return self._spec.serves or self._spec.name

    async def aclose(self) -> None:
        """Close the pooled connections (safe to call twice)."""
        await self._http.aclose()

    async def call(self, arguments: str, ctx: ToolContext) -> ToolOutcome:
        """POST the call; retry what is worth retrying; never raises for an endpoint failure."""
        name = self._called(ctx)
        body = json.dumps({
            "type": "function_call", "id": "fc_" + uuid.uuid4().hex, "call_id": ctx.call_id,
            "name": name, "arguments": arguments, "trace_id": ctx.trace_id,
            "item": ctx.item,
        }, default=str).encode()
        if len(body) > MAX_BYTES:
            return ToolOutcome(
                output=f"Error: arguments too large for tool '{name}' ({len(body)} bytes "
                       f"with the call's context; the limit is 1 MB). Send smaller arguments.",
                status="tool_error", error=f"request body of {len(body)} bytes exceeds 1 MB")
        url = self._spec.server_url
        try:
            answer = await retrying_post(
                self._http.get(), url, body, what=f"endpoint {url}",
                parse=partial(_output, ctx.call_id), attempts=1 + max(0, self._spec.max_retries),
                timeout_s=self._spec.timeout_s, backoff_s=self._backoff_s, trace_id=ctx.trace_id,
                max_bytes=MAX_BYTES, signing_secret=self._signing_secret)
        except Rejected as e:
            text = e.body.decode(errors="replace")
            shown = text if len(text) <= ERROR_BODY_CHARS else text[:ERROR_BODY_CHARS] + "..."
            return ToolOutcome(output=f"Error: HTTP {e.status} from tool '{name}': {shown}",
                               status="tool_error", error=f"HTTP {e.status}", http_status=e.status)
        except TooLarge as e:
            return ToolOutcome(output=f"Error: tool output exceeds 1 MB (tool '{name}')",
                               status="tool_error", error=e.reason)
        except Exhausted as e:
            return ToolOutcome(
                output=f"Error: tool '{name}' is unavailable ({e.reason})",
                status="infra_error", http_status=e.status,
                error=f"{e} (check that the tool server is up and answers the function_call "
                      "contract)")
        return ToolOutcome(output=answer.value, http_status=answer.status)

    def _called(self, ctx: ToolContext) -> str:
        """The name the model called: an entry that ``serves`` many gets it from the call."""
        return ctx.tool_name if self._spec.serves and ctx.tool_name else self._spec.name


def _output(call_id: str, answer: dict[str, object]) -> str:
    """The ``output`` text of a ``function_call_output`` answer; BadAnswer when it is garbage."""
    if "output" not in answer:
        raise BadAnswer(f"answer has no 'output' (keys: {sorted(answer)})")
    # A missing call_id is tolerated (simple endpoints echo only the output); a wrong one means
    # the answer belongs to another call.
    if "call_id" in answer and answer["call_id"] != call_id:
        raise BadAnswer(f"answer's call_id {answer['call_id']!r} is not {call_id!r}")
    if answer.get("type", "function_call_output") != "function_call_output":
        raise BadAnswer(f"answer's type is {answer['type']!r}, not 'function_call_output'")
    output = answer["output"]
    return output if isinstance(output, str) else json.dumps(output)

"""What every HTTP client of arft shares (endpoint tools, the endpoint grader, OpenAI-compatible
engines and judges): one keep-alive client per event loop, and ``retrying_post``, the one retry
loop: which failures are retried, the backoff, the timeout, the trace_id header and the errors.

Each caller turns ``retrying_post``'s outcome into its own record: the value its ``parse`` made
from a 2xx JSON object, or an ``HttpFailure`` (``Rejected``: a 4xx, the request is wrong;
``TooLarge``; ``Exhausted``: every attempt failed for a reason worth retrying).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Generic, Mapping, TypeVar

import httpx

from arft.signing import SIGNATURE_HEADER, sign

T = TypeVar("T")

RETRYABLE_4XX = frozenset({408, 429})
"""Request timeout and rate limited mean "not now", not "bad request": retried like a 5xx."""
TRACE_HEADER = "X-Trace-Id"
"""The header that names the rollout a request belongs to (every call carries its trace_id)."""
ERROR_TEXT_CHARS = 300
"""How much of a server's error message goes into an error."""


def is_http_url(url: str) -> bool:
    """Whether ``url`` is an absolute http(s) URL with a host (what every endpoint needs)."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL:
        return False
    return parsed.scheme in ("http", "https") and bool(parsed.host)


def backoff_delay(backoff_s: float, retry: int, cap_s: float = 30.0) -> float:
    """Seconds to wait before retry number ``retry`` (1-based): ``backoff_s`` doubling, capped."""
    return min(backoff_s * 2 ** (retry - 1), cap_s)


class LoopClient:
    """A pooled ``httpx.AsyncClient`` for the running event loop.

    Connections belong to the loop that opened them: on another loop (a second ``asyncio.run``)
    a fresh client is made and the old one is dropped, since it can be neither reused nor closed
    from there.
    """

    def __init__(self, **client_kwargs: Any) -> None:
        self._kwargs = client_kwargs
        self._client: httpx.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def get(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop or self._client.is_closed:
            self._client, self._loop = httpx.AsyncClient(**self._kwargs), loop
        return self._client

    async def aclose(self) -> None:
        """Close the pooled connections (safe to call twice, and from another loop)."""
        client, loop, self._client, self._loop = self._client, self._loop, None, None
        if client is not None and not client.is_closed and loop is asyncio.get_running_loop():
            await client.aclose()


def json_client(timeout_s: float, headers: Mapping[str, str] | None = None) -> LoopClient:
    """The ``LoopClient`` a JSON-over-HTTP caller uses: ``headers`` on every request (after a
    JSON content-type, so a caller's own wins), ``timeout_s`` per network operation, and no cap
    on concurrent connections (rollouts call in parallel; a cap would only queue them)."""
    return LoopClient(headers={"content-type": "application/json", **(headers or {})},
                      timeout=httpx.Timeout(timeout_s),
                      limits=httpx.Limits(max_connections=None, max_keepalive_connections=64))


class BadAnswer(Exception):
    """Raised by a ``retrying_post`` parser for a 2xx answer it cannot use: retried like a 5xx."""


class HttpFailure(Exception):
    """Why ``retrying_post`` gave up; ``str()`` is one sentence that names the request's ``what``.

    ``reason``: the last attempt's failure alone; ``status``: its HTTP status (``None`` when no
    answer came); ``body``: the answer's bytes (a rejection's, for callers that show it).
    """

    def __init__(self, message: str, reason: str, status: int | None = None,
                 body: bytes = b"") -> None:
        super().__init__(message)
        self.reason = reason
        self.status = status
        self.body = body


class Rejected(HttpFailure):
    """A 4xx outside ``retry_4xx``: the request itself is wrong, so it is not retried."""


class TooLarge(HttpFailure):
    """The answer passed ``max_bytes``; not retried (another attempt would fetch it again)."""


class Exhausted(HttpFailure):
    """Every one of ``attempts`` attempts failed for a reason worth retrying."""

    def __init__(self, message: str, reason: str, status: int | None, attempts: int) -> None:
        super().__init__(message, reason, status)
        self.attempts = attempts


@dataclass(frozen=True)
class Answer(Generic[T]):
    """A successful ``retrying_post``: what ``parse`` made, the 2xx status, attempts it took."""

    value: T
    status: int
    attempts: int


class _Retry(Exception):
    """One attempt failed for a reason worth retrying."""

    def __init__(self, reason: str, status: int | None = None) -> None:
        super().__init__(reason)
        self.status = status


async def retrying_post(client: httpx.AsyncClient, url: str, body: bytes, *, what: str,
                        parse: Callable[[dict[str, object]], T], attempts: int, timeout_s: float,
                        backoff_s: float, trace_id: str | None = None,
                        headers: Mapping[str, str] | None = None,
                        retry_4xx: frozenset[int] = RETRYABLE_4XX, max_bytes: int | None = None,
                        before_attempt: Callable[[], Awaitable[None]] | None = None,
                        signing_secret: str | None = None) -> Answer[T]:
    """POST ``body`` (JSON bytes) to ``url`` up to ``attempts`` times; ``parse`` the JSON object.

    Retried after ``backoff_delay(backoff_s, retry)``: a 5xx or non-2xx outside the 4xx range, a
    status in ``retry_4xx``, no complete answer within ``timeout_s`` (the whole exchange; httpx's
    own timeout is per read), a connection error, an answer that is not a JSON object and a
    ``BadAnswer`` from ``parse``. ``trace_id`` goes in the ``TRACE_HEADER``; ``before_attempt``
    (a rate limiter) is awaited before every attempt; ``what`` names the request in messages.
    With ``signing_secret`` every attempt carries its own ``arft-signature`` of ``body``, each
    with a later timestamp than the one before (so a server's replay cache never refuses a
    retry; see ``arft.signing``).

    Raises ``Rejected`` (any other 4xx, at once), ``TooLarge`` (the answer passed ``max_bytes``)
    or ``Exhausted``; anything else ``parse`` or ``before_attempt`` raises propagates as is.
    """
    sent = {**(headers or {}), **({TRACE_HEADER: trace_id} if trace_id else {})}
    attempts = max(1, attempts)
    last = _Retry("no attempt made")
    signed_at = 0
    for attempt in range(attempts):
        if attempt:
            await asyncio.sleep(backoff_delay(backoff_s, attempt))
        if before_attempt is not None:
            await before_attempt()
        try:
            signed = sent
            if signing_secret:
                # each attempt a later second: a retry never repeats the signature it follows
                signed_at = max(int(time.time()), signed_at + 1)
                signed = {**sent, SIGNATURE_HEADER: sign(body, signing_secret, signed_at)}
            status, raw = await _exchange(client, url, body, signed, timeout_s, max_bytes, what)
            if 400 <= status < 500 and status not in retry_4xx:
                reason = f"HTTP {status}: {server_message(raw)}"
                raise Rejected(f"{what} rejected the request with {reason}", reason, status, raw)
            if not 200 <= status < 300:
                raise _Retry(f"HTTP {status}: {server_message(raw)}", status)
            try:
                return Answer(parse(json_object(raw)), status, attempt + 1)
            except BadAnswer as e:
                raise _Retry(str(e), status) from None
        except _Retry as e:
            last = e
    raise Exhausted(f"{what} failed {attempts} time(s); last: {last}", str(last), last.status,
                    attempts)


async def _exchange(client: httpx.AsyncClient, url: str, body: bytes, headers: Mapping[str, str],
                    timeout_s: float, max_bytes: int | None, what: str) -> tuple[int, bytes]:
    """One POST: the status and body, or ``_Retry`` for a timeout or connection failure."""
    try:
        async with asyncio.timeout(timeout_s):
            async with client.stream("POST", url, content=body, headers=headers) as resp:
                return resp.status_code, await _read(resp, max_bytes, what)
    except (TimeoutError, httpx.TimeoutException):
        raise _Retry(f"no answer within {timeout_s:g}s") from None
    except httpx.TransportError as e:
        raise _Retry(f"connection failed: {type(e).__name__}: {e}") from None
    except httpx.DecodingError as e:  # a body that does not match its content-encoding
        raise _Retry(f"answer could not be decoded: {e}") from None


async def _read(resp: httpx.Response, max_bytes: int | None, what: str) -> bytes:
    """The body, read as a stream and abandoned as soon as it passes ``max_bytes``."""
    declared = resp.headers.get("content-length")
    if max_bytes is not None and declared is not None and declared.isdigit() \
            and int(declared) > max_bytes:
        reason = f"answer of {declared} bytes is over the {max_bytes}-byte limit"
        raise TooLarge(f"{what}: {reason}", reason, resp.status_code)
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.aiter_bytes():
        size += len(chunk)
        if max_bytes is not None and size > max_bytes:
            reason = f"answer passed the {max_bytes}-byte limit (read {size} bytes, stopped)"
            raise TooLarge(f"{what}: {reason}", reason, resp.status_code)
        chunks.append(chunk)
    return b"".join(chunks)


def json_object(raw: bytes) -> dict[str, Any]:
    """``raw`` decoded as a JSON object; ``BadAnswer`` when it is not JSON or not an object."""
    try:
        answer = json.loads(raw)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError alike
        raise BadAnswer(f"answer is not JSON: {raw[:120]!r}") from None
    except RecursionError:
        raise BadAnswer(f"answer is JSON nested too deeply to read: {raw[:40]!r}...") from None
    if not isinstance(answer, dict):
        raise BadAnswer(f"answer is a JSON {type(answer).__name__}, not an object")
    return answer


def server_message(raw: bytes, limit: int = ERROR_TEXT_CHARS) -> str:
    """What an error answer says: ``error.message`` / ``detail`` of a JSON body, else its text."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return raw.decode(errors="replace")[:limit] or "(empty body)"
    if isinstance(data, dict):
        err = data.get("error", data.get("detail", data))
        if isinstance(err, dict) and "message" in err:
            return str(err["message"])[:limit]
        return (err if isinstance(err, str) else json.dumps(err))[:limit]
    return json.dumps(data)[:limit]

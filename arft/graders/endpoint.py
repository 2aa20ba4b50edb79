"""The hosted ``endpoint`` grader: your own HTTP service scores each rollout.

Spec (the hosted fields, with arft's defaults)::

    {"type": "endpoint", "name": "my_grader", "url": "https://grader.example/score",
     "headers": {"Authorization": "Bearer ..."}, "timeout_s": 30, "max_retries": 3,
     "rate_limit_per_s": null}

Each grade POSTs ``{"sample": <the sample namespace>, "item": <the task's item>, "trace_id":
<the rollout's trace_id>}`` and expects ``{"score": <finite number>}`` back, optionally with
``"sub_scores": {name: number}``, ``"passed": bool`` and ``"flags": [str]``. What happens when it
does not:

* 5xx, 408, 429, a timeout, a connection error or an unusable answer (not JSON, no finite
  ``score``, wrong types): retried ``max_retries`` times with exponential backoff, then an error
  Score carrying the last reason.
* Any other 4xx: an error Score at once (the request itself is wrong; retrying cannot help).

``${ENV_VAR}`` references in ``headers`` and ``signing_secret`` are resolved when the grader is
built (``arft.secrets``); with a ``signing_secret`` every request carries an ``arft-signature``
(``arft.signing``).

``rate_limit_per_s`` caps how many requests (retries included) the grader starts per second,
across all its concurrent grades. One pooled keep-alive client per grader and event loop. The
retry loop is ``arft.http.retrying_post``; the rollout's trace_id also travels in its header.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from pathlib import Path

from arft.config.graders import EndpointSpec
from arft.graders.base import GraderError, validate_spec
from arft.http import BadAnswer, Exhausted, Rejected, is_http_url, json_client, retrying_post
from arft.records import Score
from arft.secrets import SecretError, resolve, resolve_map


class RateLimiter:
    """At most ``rate`` acquisitions per second, spaced ``1 / rate`` apart, shared by callers.

    Each caller reserves the next free slot synchronously (no await between reading and writing
    the slot, so concurrent tasks on one loop cannot take the same slot), then sleeps until it.
    Any window of one second therefore holds at most ``rate`` slots.
    """

    def __init__(self, rate: float) -> None:
        self.interval = 1.0 / rate
        self._next = 0.0

    async def acquire(self) -> None:
        now = time.monotonic()
        slot = max(now, self._next)
        self._next = slot + self.interval
        if slot > now:
            await asyncio.sleep(slot - now)


class EndpointGrader:
    """Scores a rollout by POSTing it to ``spec.url``; never raises for an endpoint failure."""

    def __init__(self, spec: EndpointSpec, backoff_s: float = 0.5) -> None:
        """``backoff_s``: the wait before the first retry; each later retry waits twice as long.

        Raises ``SecretError`` when a ``${ENV_VAR}`` its headers or signing secret name is unset.
        """
        where = f"grader {spec.name!r} (endpoint)"
        self.spec = spec
        self.name = spec.name
        self._backoff_s = backoff_s
        self._limiter = RateLimiter(spec.rate_limit_per_s) if spec.rate_limit_per_s else None
        self._signing_secret = (resolve(spec.signing_secret, f"{where}: signing_secret")
                                if spec.signing_secret else None)
        self._http = json_client(spec.timeout_s, resolve_map(spec.headers, f"{where}: headers"))

    async def aclose(self) -> None:
        """Close the pooled connections (safe to call twice)."""
        await self._http.aclose()

    def _error(self, reason: str) -> Score:
        return Score(score=0.0, error=f"{self.name}: {reason}", grader=self.name)

    async def grade(self, sample: dict[str, object], item: dict[str, object]) -> Score:
        trajectory = sample.get("trajectory")
        trace_id = trajectory.get("trace_id") if isinstance(trajectory, dict) else None
        body = json.dumps({"sample": sample, "item": item, "trace_id": trace_id},
                          default=str).encode()
        try:
            answer = await retrying_post(
                self._http.get(), self.spec.url, body, what=f"endpoint {self.spec.url}",
                parse=self._parse, attempts=1 + self.spec.max_retries,
                timeout_s=self.spec.timeout_s, backoff_s=self._backoff_s, trace_id=trace_id,
                before_attempt=self._limiter.acquire if self._limiter is not None else None,
                signing_secret=self._signing_secret)
        except Rejected as e:
            return self._error(f"{e}; fix the request or the grader server (not retried)")
        except Exhausted as e:
            return self._error(f"{e} (check that the grader server is up and answers "
                               "{\"score\": number})")
        return answer.value

    def _parse(self, answer: dict[str, object]) -> Score:
        """The Score in a 2xx answer's JSON object; BadAnswer when it is unusable."""
        score = _number(answer.get("score"))
        if score is None:
            raise BadAnswer(f"answer has no finite number 'score' (got {answer.get('score')!r})")
        subs = answer.get("sub_scores") or {}
        if not isinstance(subs, dict) or any(_number(v) is None for v in subs.values()):
            raise BadAnswer(f"answer's 'sub_scores' is not an object of finite numbers: {subs!r}")
        passed = answer.get("passed")
        if passed is not None and not isinstance(passed, bool):
            raise BadAnswer(f"answer's 'passed' is not true, false or null: {passed!r}")
        flags = answer.get("flags") or []
        if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
            raise BadAnswer(f"answer's 'flags' is not a list of strings: {flags!r}")
        return Score(score=score, sub_scores={str(k): float(v) for k, v in subs.items()},
                     passed=passed, flags=tuple(flags), grader=self.name)


def _number(value: object) -> float | None:
    """``value`` as a finite float, or ``None`` (booleans are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # a JSON integer too large for a float
        return None
    return number if math.isfinite(number) else None


def build(spec: dict[str, object], base_dir: Path) -> EndpointGrader:
    """Registry entry point (``base_dir`` is unused). Raises ``GraderError`` for a bad spec."""
    parsed = validate_spec(EndpointSpec, spec)
    if not is_http_url(parsed.url):
        raise GraderError(f"grader {parsed.name!r} (endpoint): field 'url': {parsed.url!r} is not "
                          "an http(s) URL; write it like https://host:port/path")
    try:
        return EndpointGrader(parsed)
    except SecretError as e:
        raise GraderError(str(e)) from None

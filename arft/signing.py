"""Signed tool and grader requests: HMAC-SHA256 over a timestamp and the body, webhook style.

arft signs every request of an endpoint tool or endpoint grader whose spec has a
``signing_secret`` (best a ``${ENV_VAR}`` reference)::

    arft-signature: t=1718000000,v1=5f1c...e9

``v1`` is the hex HMAC-SHA256, keyed by the secret, of the bytes ``b"<t>." + body``: the exact
body bytes sent, so a server must verify the raw body before parsing it. Each attempt (a retry
too) is signed afresh with its own timestamp.

A tool server verifies with ``verify`` (and, to refuse a request sent twice, a ``ReplayCache``)::

    from arft.signing import ReplayCache, SignatureError, verify_request
    seen = ReplayCache()
    try:
        verify_request(raw_body, headers.get("arft-signature"), secret, replay_cache=seen)
    except SignatureError as e:
        return 401, str(e)

This module uses the standard library only, so a server can copy or import it without arft's
dependencies.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
import time

SIGNATURE_HEADER = "arft-signature"
"""The request header that carries the signature."""
SCHEME = "v1"
"""The signature scheme's name in the header (HMAC-SHA256, hex)."""
DEFAULT_MAX_AGE_S = 300.0
"""How old (or how far in the future, for clock skew) a signature's timestamp may be."""


class SignatureError(ValueError):
    """A request whose signature is missing, malformed, wrong or too old; the message says which
    (a server answers it with 401)."""


def signature(body: bytes, secret: str, timestamp: int) -> str:
    """The hex HMAC-SHA256 of ``b"<timestamp>." + body`` keyed by ``secret``."""
    payload = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), payload, hashlib.sha256).hexdigest()


def sign(body: bytes, secret: str, timestamp: int | None = None) -> str:
    """The ``arft-signature`` header value for ``body``: ``t=<unix seconds>,v1=<hex>``
    (``timestamp`` defaults to now)."""
    t = int(time.time()) if timestamp is None else timestamp
    return f"t={t},{SCHEME}={signature(body, secret, t)}"


def parse_header(header: str | None) -> tuple[int, list[str]]:
    """The timestamp and the ``v1`` signatures of a header; ``SignatureError`` when there is no
    header or it is not ``t=<int>,v1=<hex>[,v1=<hex>...]``."""
    if not header or not header.strip():
        raise SignatureError(f"unsigned request: no {SIGNATURE_HEADER} header")
    timestamp: int | None = None
    signatures: list[str] = []
    for part in header.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep:
            raise SignatureError(f"malformed {SIGNATURE_HEADER} header: {part.strip()!r} is not "
                                 "key=value")
        if key == "t":
            if not value.isdigit():
                raise SignatureError(f"malformed {SIGNATURE_HEADER} header: t={value!r} is not "
                                     "a unix timestamp")
            timestamp = int(value)
        elif key == SCHEME:
            signatures.append(value)
    if timestamp is None or not signatures:
        raise SignatureError(f"malformed {SIGNATURE_HEADER} header: it needs t=<unix seconds> and "
                             f"{SCHEME}=<hex signature>")
    return timestamp, signatures


def verify(body: bytes, header: str | None, secret: str, max_age_s: float = DEFAULT_MAX_AGE_S,
           now: float | None = None) -> None:
    """Check that ``header`` signs ``body`` (the raw bytes received) with ``secret`` and that its
    timestamp is within ``max_age_s`` of ``now`` (default: the clock).

    Raises ``SignatureError``: unsigned (no header), malformed, too old or too far in the future
    (a stale or replayed request), or tampered (no signature matches: the body, the timestamp or
    the secret differ).
    """
    timestamp, signatures = parse_header(header)
    now = time.time() if now is None else now
    age = now - timestamp
    if age > max_age_s:
        raise SignatureError(f"stale request: signed {age:.0f}s ago, more than {max_age_s:g}s "
                             "(a replay, or a clock out of sync)")
    if age < -max_age_s:
        raise SignatureError(f"request signed {-age:.0f}s in the future, more than {max_age_s:g}s "
                             "(check the clocks of the two machines)")
    expected = signature(body, secret, timestamp)
    if not any(hmac.compare_digest(expected, s) for s in signatures):
        raise SignatureError("bad signature: the body or the timestamp was changed, or the "
                             "secret differs from the one arft signs with")


class ReplayCache:
    """The signatures seen in the last ``max_age_s`` seconds: a valid request sent twice is
    refused the second time. Entries older than ``max_age_s`` are dropped, since ``verify``
    refuses their timestamps anyway. Safe to share between threads."""

    def __init__(self, max_age_s: float = DEFAULT_MAX_AGE_S) -> None:
        self.max_age_s = max_age_s
        self._seen: dict[str, float] = {}
        self._lock = threading.Lock()

    def add(self, header: str, now: float | None = None) -> None:
        """Remember the signatures of ``header``; ``SignatureError`` when one was seen already."""
        timestamp, signatures = parse_header(header)
        now = time.time() if now is None else now
        with self._lock:
            self._seen = {s: t for s, t in self._seen.items() if now - t <= self.max_age_s}
            if any(s in self._seen for s in signatures):
                raise SignatureError("replayed request: this signature was already used")
            self._seen.update((s, float(timestamp)) for s in signatures)

    def __len__(self) -> int:
        return len(self._seen)


def verify_request(body: bytes, header: str | None, secret: str,
                   max_age_s: float = DEFAULT_MAX_AGE_S, replay_cache: ReplayCache | None = None,
                   now: float | None = None) -> None:
    """``verify``, then (with a ``replay_cache``) refuse a signature already seen. Only a valid
    request is remembered, so a forged one cannot block the real one."""
    verify(body, header, secret, max_age_s, now)
    if replay_cache is not None:
        replay_cache.add(header or "", now)

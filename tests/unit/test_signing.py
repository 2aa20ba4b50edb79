"""arft.signing: the header arft sends verifies; every way a request can be wrong is refused with
a reason that says which."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from arft.signing import ReplayCache, SignatureError, parse_header, sign, verify, verify_request

SECRET = "whsec_test_secret"
BODY = b'{"type": "function_call", "arguments": "{\\"x\\": 1}"}'
NOW = 1_700_000_000


def test_the_signature_is_hmac_sha256_of_timestamp_dot_body() -> None:
    header = sign(BODY, SECRET, NOW)
    expected = hmac.new(SECRET.encode(), f"{NOW}.".encode() + BODY, hashlib.sha256).hexdigest()
    assert header == f"t={NOW},v1={expected}"
    verify(BODY, header, SECRET, now=NOW + 10)


@pytest.mark.parametrize("body, header, secret, match", [
    (BODY + b" ", None, SECRET, "bad signature"),  # tampered body
    (BODY, "t=1700000001," + sign(BODY, SECRET, NOW).split(",")[1], SECRET, "bad signature"),
    (BODY, None, "another secret", "bad signature"),
    (BODY, "", SECRET, "unsigned"),
    (BODY, "v1=abc", SECRET, "malformed"),
    (BODY, "t=soon,v1=abc", SECRET, "malformed"),
    (BODY, "garbage", SECRET, "malformed"),
])
def test_tampered_unsigned_and_malformed_are_refused(body: bytes, header: str | None, secret: str,
                                                     match: str) -> None:
    header = sign(BODY, SECRET, NOW) if header is None else header
    with pytest.raises(SignatureError, match=match):
        verify(body, header, secret, now=NOW)


def test_a_missing_header_is_unsigned() -> None:
    with pytest.raises(SignatureError, match="unsigned request"):
        verify(BODY, None, SECRET)


def test_stale_and_future_timestamps_are_refused() -> None:
    header = sign(BODY, SECRET, NOW)
    verify(BODY, header, SECRET, max_age_s=300, now=NOW + 300)
    with pytest.raises(SignatureError, match="stale request"):
        verify(BODY, header, SECRET, max_age_s=300, now=NOW + 301)
    with pytest.raises(SignatureError, match="in the future"):
        verify(BODY, header, SECRET, max_age_s=300, now=NOW - 301)


def test_any_matching_v1_signature_is_accepted() -> None:
    """Several v1 entries (a secret being rotated): one match suffices."""
    good = sign(BODY, SECRET, NOW).split(",")[1]
    verify(BODY, f"t={NOW},v1={'0' * 64},{good}", SECRET, now=NOW)
    assert parse_header(f"t={NOW}, {good}") == (NOW, [good.split("=")[1]])


def test_the_replay_cache_refuses_a_request_sent_twice_until_it_expires() -> None:
    cache = ReplayCache(max_age_s=60)
    header = sign(BODY, SECRET, NOW)
    verify_request(BODY, header, SECRET, replay_cache=cache, now=NOW)
    with pytest.raises(SignatureError, match="replayed"):
        verify_request(BODY, header, SECRET, replay_cache=cache, now=NOW + 1)
    verify_request(BODY, sign(BODY, SECRET, NOW + 1), SECRET, replay_cache=cache, now=NOW + 1)
    cache.add(sign(b"other", SECRET, NOW + 100), now=NOW + 100)
    assert len(cache) == 1  # the expired entries were dropped


def test_a_forged_request_is_not_remembered() -> None:
    """Only a valid request enters the cache: a forgery cannot block the real one."""
    cache = ReplayCache()
    header = sign(BODY, SECRET, NOW)
    with pytest.raises(SignatureError, match="bad signature"):
        verify_request(BODY + b"x", header, SECRET, replay_cache=cache, now=NOW)
    verify_request(BODY, header, SECRET, replay_cache=cache, now=NOW)

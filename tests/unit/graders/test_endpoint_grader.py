"""endpoint grader against a real FastAPI server on 127.0.0.1: contract, retries, rate limit.

The server is arft.http's scripted one (tests/unit/test_http.py): each POST to ``/<route>`` takes
the next ``(status, body, delay_s)`` from ``script.steps[route]`` (the last one repeats) and
records what it received.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from arft.config.graders import EndpointSpec
from arft.graders.base import GraderError, build_sample, validate_spec
from arft.graders.endpoint import EndpointGrader
from arft.graders.registry import build_grader
from arft.records import Score
from tests.servers import free_port, serve
from tests.unit.test_http import Script, make_app

from .helpers import make_rollout

OK = (200, b'{"score": 0.75}', 0.0)


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, Script]]:
    script = Script(ok=OK)
    with serve(make_app(script)) as url:
        yield url, script


@pytest.fixture
def script(server: tuple[str, Script]) -> Script:
    server[1].steps.clear()
    server[1].seen.clear()
    return server[1]


def grader(url: str, **extra: Any) -> EndpointGrader:
    spec = validate_spec(EndpointSpec, {"type": "endpoint", "name": "remote", "url": url, **extra})
    return EndpointGrader(spec, backoff_s=0.01)


async def grade(g: EndpointGrader) -> Score:
    rollout = make_rollout()
    try:
        return await g.grade(build_sample(rollout), rollout.item)
    finally:
        await g.aclose()


async def test_body_headers_and_full_answer(server: tuple[str, Script], script: Script) -> None:
    script.steps["full"] = [(200, json.dumps({"score": 0.8, "sub_scores": {"f1": 0.6},
                                              "passed": True, "flags": ["hack:x"]}).encode(), 0)]
    spec = {"type": "endpoint", "name": "remote", "url": f"{server[0]}/full",
            "headers": {"Authorization": "Bearer t0k3n", "X-Team": "rl"}}
    g = build_grader(spec, Path("."))
    rollout = make_rollout()
    sample = build_sample(rollout)
    score = await g.grade(sample, rollout.item)
    assert score == Score(score=0.8, sub_scores={"f1": 0.6}, passed=True, flags=("hack:x",),
                          grader="remote")
    [seen] = script.seen["full"]
    assert seen.body == {"sample": json.loads(json.dumps(sample)), "item": rollout.item,
                         "trace_id": rollout.trace_id}
    assert seen.body["sample"]["output_text"] == "The capital is Paris."
    assert seen.headers["authorization"] == "Bearer t0k3n" and seen.headers["x-team"] == "rl"
    assert seen.headers["content-type"] == "application/json"


async def test_minimal_answer_and_pooled_connection(server: tuple[str, Script],
                                                    script: Script) -> None:
    g = grader(f"{server[0]}/min")
    rollout = make_rollout()
    scores = [await g.grade(build_sample(rollout), rollout.item) for _ in range(3)]
    await g.aclose()
    assert scores == [Score(score=0.75, grader="remote")] * 3
    assert len({s.port for s in script.seen["min"]}) == 1  # one keep-alive connection


async def test_5xx_is_retried_then_ok(server: tuple[str, Script], script: Script) -> None:
    script.steps["flaky"] = [(503, b"down", 0), (500, b"oops", 0), OK]
    score = await grade(grader(f"{server[0]}/flaky", max_retries=3))
    assert score.score == 0.75 and score.error is None
    assert len(script.seen["flaky"]) == 3


async def test_5xx_beyond_retries_is_an_error(server: tuple[str, Script], script: Script) -> None:
    script.steps["down"] = [(502, b"bad gateway", 0)]
    score = await grade(grader(f"{server[0]}/down", max_retries=1))
    assert score.score == 0.0 and len(script.seen["down"]) == 2
    assert score.error is not None and score.error.startswith("remote: endpoint ")
    assert "failed 2 time(s); last: HTTP 502: bad gateway" in score.error


async def test_4xx_is_not_retried(server: tuple[str, Script], script: Script) -> None:
    script.steps["bad"] = [(422, b'{"detail": "missing item.answer"}', 0), OK]
    score = await grade(grader(f"{server[0]}/bad", max_retries=3))
    assert score.score == 0.0 and len(script.seen["bad"]) == 1
    assert score.error is not None and "HTTP 422" in score.error
    assert "missing item.answer" in score.error and "not retried" in score.error


async def test_429_is_retried(server: tuple[str, Script], script: Script) -> None:
    script.steps["busy"] = [(429, b"slow down", 0), OK]
    score = await grade(grader(f"{server[0]}/busy"))
    assert score.score == 0.75 and len(script.seen["busy"]) == 2


async def test_timeout_is_retried_then_an_error(server: tuple[str, Script],
                                                script: Script) -> None:
    script.steps["slow"] = [(200, b'{"score": 1}', 1.0)]
    score = await grade(grader(f"{server[0]}/slow", timeout_s=0.2, max_retries=1))
    assert score.score == 0.0 and len(script.seen["slow"]) == 2
    assert score.error is not None and "no answer within 0.2s" in score.error


async def test_connection_refused_is_an_error() -> None:
    score = await grade(grader(f"http://127.0.0.1:{free_port()}/x", max_retries=2))
    assert score.score == 0.0 and score.error is not None
    assert "failed 3 time(s); last: connection failed" in score.error


async def test_garbage_is_retried_then_ok(server: tuple[str, Script], script: Script) -> None:
    script.steps["garbage"] = [(200, b"<html>oops</html>", 0), OK]
    score = await grade(grader(f"{server[0]}/garbage"))
    assert score.score == 0.75 and len(script.seen["garbage"]) == 2


@pytest.mark.parametrize("body, reason", [
    (b"<html>oops</html>", "answer is not JSON"),
    (b"[0.5]", "answer is a JSON list, not an object"),
    (b'{"result": 1}', "answer has no finite number 'score' (got None)"),
    (b'{"score": NaN}', "no finite number 'score' (got nan)"),
    (b'{"score": Infinity}', "no finite number 'score' (got inf)"),
    (b'{"score": "0.5"}', "no finite number 'score' (got '0.5')"),
    (b'{"score": true}', "no finite number 'score' (got True)"),
    (b'{"score": 1, "sub_scores": {"a": "x"}}', "'sub_scores' is not an object of finite"),
    (b'{"score": 1, "passed": "yes"}', "'passed' is not true, false or null"),
    (b'{"score": 1, "flags": "hack"}', "'flags' is not a list of strings"),
])
async def test_unusable_answers_are_error_scores(server: tuple[str, Script], script: Script,
                                                 body: bytes, reason: str) -> None:
    script.steps["junk"] = [(200, body, 0)]
    score = await grade(grader(f"{server[0]}/junk", max_retries=1))
    assert score.score == 0.0 and len(script.seen["junk"]) == 2
    assert score.error is not None and reason in score.error


async def test_rate_limit_is_shared_by_concurrent_grades(server: tuple[str, Script],
                                                         script: Script) -> None:
    rate, n = 20.0, 10
    g = grader(f"{server[0]}/rated", rate_limit_per_s=rate)
    rollout = make_rollout()
    sample = build_sample(rollout)
    start = time.monotonic()
    scores = await asyncio.gather(*(g.grade(sample, rollout.item) for _ in range(n)))
    await g.aclose()
    assert all(s.score == 0.75 for s in scores)
    arrivals = sorted(s.at - start for s in script.seen["rated"])
    assert len(arrivals) == n
    # Count per window: in the first k / rate seconds at most k requests may arrive, i.e. the
    # k-th arrival (from 0) is no earlier than k / rate. Delays only make arrivals later.
    for k, at in enumerate(arrivals):
        assert at >= k / rate - 1e-3, (k, arrivals)


async def test_rate_limit_counts_retries(server: tuple[str, Script], script: Script) -> None:
    script.steps["rated_flaky"] = [(503, b"", 0), (503, b"", 0), OK]
    g = grader(f"{server[0]}/rated_flaky", rate_limit_per_s=10.0)
    start = time.monotonic()
    assert (await grade(g)).score == 0.75
    arrivals = sorted(s.at - start for s in script.seen["rated_flaky"])
    assert len(arrivals) == 3 and arrivals[2] >= 0.2 - 1e-3


def test_pool_is_per_event_loop(server: tuple[str, Script], script: Script) -> None:
    g = grader(f"{server[0]}/loops")
    rollout = make_rollout()
    # Two separate event loops: the second must not reuse the first loop's connections.
    for _ in range(2):
        score = asyncio.run(g.grade(build_sample(rollout), rollout.item))
        assert score.score == 0.75 and score.error is None
    assert len(script.seen["loops"]) == 2


@pytest.mark.parametrize("change, part", [
    ({"url": "ftp://host/x"}, "field 'url': 'ftp://host/x' is not an http(s) URL"),
    ({"url": "not a url"}, "field 'url'"),
    ({"timeout_s": 0}, "field 'timeout_s'"),
    ({"max_retries": -1}, "field 'max_retries'"),
    ({"rate_limit_per_s": 0}, "field 'rate_limit_per_s'"),
    ({"headers": {"a": 1}}, "field 'headers.a'"),
    ({"retries": 3}, "did you mean 'max_retries'"),
])
def test_bad_spec_names_grader_and_field(change: dict[str, Any], part: str) -> None:
    spec = {"type": "endpoint", "name": "remote", "url": "http://127.0.0.1:1/x", **change}
    with pytest.raises(GraderError) as err:
        build_grader(spec, Path("."))
    assert "grader 'remote'" in str(err.value) and part in str(err.value)

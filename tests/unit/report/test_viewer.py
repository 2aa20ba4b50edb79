"""The run viewer (`arft view`) without a browser: JSON API, HTML pages and the CLI command, on a
real run store built from hand-made rollouts (train steps, evals, flags, errors, tool calls)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from arft.cli.main import app as cli
from arft.records import Message, Rollout, Score
from arft.tracing.run_dir import NotARunDirError
from arft.report.viewer import create_app
from arft.tracing.store import RunStore
from tests.servers import free_port
from tests.unit.tracing.factories import make_rollout

XSS = "<script>alert('pwned')</script><b>bold?</b>"


def _score(value: float, **kw: Any) -> Score:
    return Score(score=value, grader="answer_check", **kw)


def build_run(run_dir: Path) -> dict[str, Rollout]:
    """A run store with 3 train steps, two evaluations during training, an `arft eval` run and an
    old-style train rollout without a step; returns the notable rollouts by name."""
    named: dict[str, Rollout] = {}
    with RunStore(run_dir / "arft.sqlite") as store:
        store.create_run("train", "train", {"model": "tiny"})
        store.create_run("train:eval-000000", "eval", {})
        store.create_run("train:eval-000002", "eval", {})
        store.create_run("base-eval", "eval", {})

        def add(name: str, step: int | None, run_id: str = "train", **kw: Any) -> None:
            r = make_rollout(run_id=run_id, **kw).model_copy(update={"step": step})
            store.add_rollout(r)
            named[name] = r

        add("s1_zero", 1, task_id="t-a", calls=[("search", 0)], score=_score(0.0, passed=False))
        add("s1_full", 1, task_id="t-a", sample_index=1, calls=[("calculator", 0), ("search", 1)],
            score=_score(1.0, passed=True))
        add("s1_parse", 1, task_id="t-b", parse_errors=1, calls=[("calculator", 0)],
            score=_score(0.5))
        add("s2_quarter", 2, task_id="t-a", calls=[("calculator", 0)], score=_score(0.25))
        add("s2_hack", 2, task_id="t-b", calls=[("calculator", 0)],
            score=_score(1.0, passed=True, flags=("hardcoded_answer",)))
        add("s2_infra", 2, task_id="t-c", calls=[("search", 0)], failing={0},
            status="infra_failed", finish_reason="infra_failed")
        add("s3_grader_error", 3, task_id="t-a",
            score=_score(0.0, error="judge timed out after 30s"))
        add("s3_subs", 3, task_id="t-b", calls=[("calculator", 0)], score=Score(
            score=0.75, sub_scores={"correct": 1.0, "brevity": 0.5}, passed=False,
            grader="multi", latency_s=0.2))
        add("old_train", None, task_id="t-a", score=_score(1.0))
        add("eval0", 0, run_id="train:eval-000000", task_id="v-a", calls=[("search", 0)],
            score=_score(0.0))
        add("eval2", None, run_id="train:eval-000002", task_id="v-a", score=_score(1.0))
        add("base", None, run_id="base-eval", task_id="v-b", score=_score(0.5))
        xss = make_rollout(run_id="train", task_id="t-x", score=_score(0.6, flags=(XSS,)))
        xss = xss.model_copy(update={"step": 3, "messages": (
            *xss.messages[:2], Message(role="assistant", content=XSS))})
        store.add_rollout(xss)
        named["xss"] = xss
    return named


@pytest.fixture
def run(tmp_path: Path) -> tuple[Path, dict[str, Rollout]]:
    return tmp_path, build_run(tmp_path)


@pytest.fixture
def client(run: tuple[Path, dict[str, Rollout]]) -> TestClient:
    return TestClient(create_app(run[0]))


def ids(client: TestClient, **params: Any) -> set[str]:
    resp = client.get("/api/rollouts", params=params)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["total"] == len(body["rollouts"])
    return {r["trace_id"] for r in body["rollouts"]}


def names(named: dict[str, Rollout], *keys: str) -> set[str]:
    return {named[k].trace_id for k in keys}


def test_api_lists_every_rollout_with_split_step_and_grade(client: TestClient, run: Any) -> None:
    named = run[1]
    body = client.get("/api/rollouts").json()
    assert body["total"] == len(named) == 13 and body["n_pages"] == 1
    rows = {r["trace_id"]: r for r in body["rollouts"]}
    hack = rows[named["s2_hack"].trace_id]
    assert (hack["split"], hack["step"], hack["reward"], hack["flags"]) == \
        ("train", 2, 1.0, ["hardcoded_answer"])
    assert hack["tools"] == ["calculator"] and hack["n_tool_calls"] == 1
    assert rows[named["s1_full"].trace_id]["tools"] == ["calculator", "search"]
    assert rows[named["old_train"].trace_id]["step"] is None
    # an eval stored before rollouts had a step gets its step from the run id
    assert (rows[named["eval2"].trace_id]["split"], rows[named["eval2"].trace_id]["step"]) == \
        ("eval", 2)
    assert rows[named["base"].trace_id]["step"] is None
    assert rows[named["s3_grader_error"].trace_id]["reward"] is None
    assert rows[named["s3_grader_error"].trace_id]["grade_error"] == "judge timed out after 30s"


def test_filters_select_the_right_rollouts(client: TestClient, run: Any) -> None:
    n = run[1]
    evals = names(n, "eval0", "eval2", "base")
    assert ids(client, split="eval") == evals
    assert ids(client, split="train") == set(x.trace_id for x in n.values()) - evals
    assert ids(client, step=2) == names(n, "s2_quarter", "s2_hack", "s2_infra", "eval2")
    assert ids(client, step=2, split="eval") == names(n, "eval2")
    assert ids(client, step=0) == names(n, "eval0")
    assert ids(client, min_reward=0.5, max_reward=0.9) == names(n, "s1_parse", "s3_subs", "base",
                                                                  "xss")
    assert ids(client, status="infra_failed") == names(n, "s2_infra")
    assert ids(client, flag="hack") == names(n, "s2_hack", "xss")
    assert ids(client, flag="hardcoded_answer") == names(n, "s2_hack")
    assert ids(client, flag="parse_error") == names(n, "s1_parse")
    assert ids(client, flag="infra_failed") == names(n, "s2_infra")
    assert ids(client, flag="grader_error") == names(n, "s3_grader_error")
    assert ids(client, tool="search") == names(n, "s1_zero", "s1_full", "s2_infra", "eval0")
    assert ids(client, tool="calculator", min_reward=0.5) == names(n, "s1_full", "s1_parse",
                                                                   "s2_hack", "s3_subs")
    assert ids(client, run="train:eval-000000") == names(n, "eval0")
    assert ids(client, task="t-b", split="train") == names(n, "s1_parse", "s2_hack", "s3_subs")
    assert ids(client, tool="nonexistent") == set()


def test_blank_form_fields_mean_no_filter(client: TestClient) -> None:
    resp = client.get("/api/rollouts?step=&split=all&min_reward=&max_reward=&status=&flag=&tool=")
    assert resp.json()["total"] == 13


def test_sort_by_reward_puts_ungraded_last(client: TestClient) -> None:
    rewards = [r["reward"] for r in client.get("/api/rollouts?sort=-reward").json()["rollouts"]]
    graded = [x for x in rewards if x is not None]
    assert graded == sorted(graded, reverse=True) and rewards[-2:] == [None, None]


def test_paging(client: TestClient, run: Any) -> None:
    pages = [client.get("/api/rollouts", params={"per_page": 5, "page": p}).json()
             for p in (1, 2, 3)]
    assert [len(p["rollouts"]) for p in pages] == [5, 5, 3]
    assert all(p["total"] == 13 and p["n_pages"] == 3 for p in pages)
    seen = [r["trace_id"] for p in pages for r in p["rollouts"]]
    assert len(set(seen)) == 13
    html = client.get("/?per_page=5&page=2&split=train").text
    assert "page 2 of 2" in html and "href='/?split=train&amp;per_page=5'>← previous" in html
    assert "next →" not in html


@pytest.mark.parametrize("query, message", [
    ("step=two", "step must be a whole number, not 'two'"),
    ("min_reward=high", "min_reward must be a number"),
    ("split=test", "split must be one of all, train, eval"),
    ("status=done", "status must be one of ok, truncated, infra_failed, error"),
    ("page=0", "page counts from 1"),
    ("colour=red", "unknown query parameter 'colour'"),
])
def test_bad_filters_say_what_is_accepted(client: TestClient, query: str, message: str) -> None:
    api = client.get(f"/api/rollouts?{query}")
    assert api.status_code == 400 and message in api.json()["detail"]
    page = client.get(f"/?{query}")
    assert page.status_code == 400 and message.replace("'", "&#x27;") in page.text


def test_list_page_shows_rows_filters_and_runs(client: TestClient, run: Any) -> None:
    n = run[1]
    html = client.get("/?tool=calculator&min_reward=0.5").text
    rows = re.findall(r"<tr><td class=mono><a href='/rollouts/(trace_\w+)'>", html)
    assert set(rows) == names(n, "s1_full", "s1_parse", "s2_hack", "s3_subs")
    assert "<b>4</b> rollouts match" in html
    assert "<option value='calculator' selected>" in html  # the form keeps the filter
    assert "value='0.5'" in html
    assert "<b>train:eval-000002</b> · eval of step 2 · 1 rollout ·" in html  # the runs bar
    assert "hardcoded_answer" in html


def test_rollout_page_shows_header_conversation_tool_calls_and_grade(client: TestClient,
                                                                      run: Any) -> None:
    r = run[1]["s1_full"]
    resp = client.get(f"/rollouts/{r.trace_id}")
    assert resp.status_code == 200
    html = resp.text
    assert f"Rollout · {r.task_id}" in html and "sample 1" in html
    assert "train</a> · train · step 1" in html
    assert "finish reason <b>answer</b>" in html
    assert "generate 1.00 · tools 0.50 · grade 0.25 · total 1.75" in html
    # every message, in order, with the assistant's tool calls as pretty JSON
    roles = re.findall(r"<div class=role>(\d+) · (\w+)</div>", html)
    assert roles == [(str(i), m.role) for i, m in enumerate(r.messages)]
    assert "→ <b>calculator</b>" in html and "→ <b>search</b>" in html
    assert "{\n  &quot;q&quot;: &quot;x&quot;\n}" in html
    # each tool result with its record's status, latency and output
    assert "<b>search</b> <span class='badge good'>ok</span> <span class=muted>0.200 s · HTTP 200" \
        in html
    assert "<pre class=output>result</pre>" in html
    assert "the answer is 42" in html
    # the model's turns start after the task's prompt (system + user here)
    assert html.index("1 · user") < html.index("class=divider>") < html.index("2 · assistant")


def test_rollout_page_grade_breakdown_and_failures(client: TestClient, run: Any) -> None:
    n = run[1]
    subs = client.get(f"/rollouts/{n['s3_subs'].trace_id}").text
    assert "<td>correct</td><td class=num>1</td>" in subs
    assert "<td>brevity</td><td class=num>0.5</td>" in subs
    assert "multi" in subs and "0.200 s" in subs and "badge bad'>false" in subs
    hack = client.get(f"/rollouts/{n['s2_hack'].trace_id}").text
    assert "<span class='badge bad'>hardcoded_answer</span>" in hack
    err = client.get(f"/rollouts/{n['s3_grader_error'].trace_id}").text
    assert "judge timed out after 30s" in err and "not a real grade" in err
    infra = client.get(f"/rollouts/{n['s2_infra'].trace_id}").text
    assert "badge bad'>infra_failed" in infra and "error: boom" in infra
    old = client.get(f"/rollouts/{n['old_train'].trace_id}").text
    assert "· train · step —" in old


def test_untrusted_text_is_escaped(client: TestClient, run: Any) -> None:
    html = client.get(f"/rollouts/{run[1]['xss'].trace_id}").text
    assert "<script>alert" not in html and "<b>bold?</b>" not in html
    assert "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;" in html
    listing = client.get("/").text
    assert "<script>alert" not in listing


def test_unknown_trace_id_is_a_404_that_says_how_to_find_one(client: TestClient, run: Any) -> None:
    resp = client.get("/rollouts/trace_nope")
    assert resp.status_code == 404
    assert "No rollout with trace_id" in resp.text and "arft show" in resp.text
    assert "href='/'" in resp.text
    api = client.get("/api/rollouts/trace_nope")
    assert api.status_code == 404 and "/api/rollouts" in api.json()["detail"]


def test_api_rollout_is_the_stored_record(client: TestClient, run: Any) -> None:
    r = run[1]["eval2"]
    body = client.get(f"/api/rollouts/{r.trace_id}").json()
    assert (body["split"], body["step"], body["reward"]) == ("eval", 2, 1.0)
    body.pop("split"), body.pop("reward")
    assert Rollout.model_validate({**body, "step": None}) == r


def test_viewer_sees_rollouts_added_while_it_runs(client: TestClient, run: Any) -> None:
    with RunStore(run[0] / "arft.sqlite") as store:
        extra = make_rollout(run_id="train", task_id="late").model_copy(update={"step": 4})
        store.add_rollout(extra)
        assert ids(client, step=4) == {extra.trace_id}


def test_create_app_needs_a_run_dir(tmp_path: Path) -> None:
    with pytest.raises(NotARunDirError, match="no arft.sqlite"):
        create_app(tmp_path)


def test_cli_refuses_a_folder_without_a_store(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["view", str(tmp_path)])
    assert result.exit_code == 2
    assert "no arft.sqlite" in " ".join(result.output.split())


def test_cli_refuses_a_busy_port(run: Any) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        result = CliRunner().invoke(cli, ["view", str(run[0]), "--port", str(port)])
    assert result.exit_code == 2
    assert f"port {port} on 127.0.0.1 is already in use" in " ".join(result.output.split())


def test_cli_serves_the_run_until_stopped(run: Any) -> None:
    port = free_port()
    arft = Path(sys.executable).with_name("arft")
    proc = subprocess.Popen([str(arft), "view", str(run[0]), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "COLUMNS": "200"})
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                resp = httpx.get(f"http://127.0.0.1:{port}/api/rollouts?flag=hack", timeout=2)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()
                time.sleep(0.1)
        assert resp.json()["total"] == 2
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    assert f"at http://127.0.0.1:{port}/" in out

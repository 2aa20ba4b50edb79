"""`arft view` in a real browser: headless Chromium (Debian's, driven by playwright) against the
viewer served on 127.0.0.1 — list, filter through the form, open a rollout, read it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from arft.records import Rollout
from arft.report.viewer import create_app
from tests.servers import serve
from tests.unit.report.test_viewer import XSS, build_run

CHROMIUM = Path("/usr/bin/chromium")
# Chromium here must not try to reach the network in the background (it stalls start-up).
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.skip(f"Chromium not installed: {CHROMIUM} is missing; run make setup "
                    "(it installs Debian's chromium package)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[str, dict[str, Rollout]]]:
    named = build_run(tmp_path)
    with serve(create_app(tmp_path)) as base:
        yield base, named


def shown_ids(page: Any) -> set[str]:
    return set(page.locator("table#rollouts tr td:first-child a").all_inner_texts())


def test_filter_then_read_a_rollout(browser: Any, site: tuple[str, dict[str, Rollout]]) -> None:
    base, named = site
    page = browser.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(base + "/")
    assert len(shown_ids(page)) == len(named) == 13

    page.select_option("select[name=tool]", "calculator")
    page.fill("input[name=min_reward]", "0.5")
    page.fill("input[name=max_reward]", "1")
    page.click("button[type=submit]")
    page.wait_for_url("**tool=calculator*")
    # blank fields are left out of the URL, so it stays short enough to share
    assert page.url == base + "/?split=all&min_reward=0.5&max_reward=1&tool=calculator"
    expected = {named[k].trace_id for k in ("s1_full", "s1_parse", "s2_hack", "s3_subs")}
    assert shown_ids(page) == expected
    assert "4 rollouts match" in page.inner_text(".pager")

    page.select_option("select[name=flag]", "hack")
    page.click("button[type=submit]")
    page.wait_for_url("**flag=hack*")
    assert shown_ids(page) == {named["s2_hack"].trace_id}

    page.click(f"text={named['s2_hack'].trace_id}")
    page.wait_for_url(f"**/rollouts/{named['s2_hack'].trace_id}")
    conversation = page.locator("#conversation .msg")
    assert conversation.count() == len(named["s2_hack"].messages)
    assert conversation.nth(2).locator(".role").inner_text().lower() == "2 · assistant"
    assert '"q": "x"' in conversation.nth(2).locator("pre.arguments").inner_text()
    tool_msg = conversation.nth(3)
    assert "calculator" in tool_msg.inner_text() and "ok" in tool_msg.inner_text()
    assert tool_msg.locator("pre.output").inner_text() == "result"
    assert "the answer is 42" in conversation.last.inner_text()
    grade = page.locator("#grade").inner_text()
    assert "hardcoded_answer" in grade and "answer_check" in grade and "true" in grade

    page.goto(f"{base}/rollouts/{named['s3_subs'].trace_id}")
    subs = page.locator("#sub-scores").inner_text()
    assert "correct" in subs and "brevity" in subs and "0.5" in subs

    # untrusted model output is shown as text and never runs
    page.goto(f"{base}/rollouts/{named['xss'].trace_id}")
    assert XSS in page.locator("#conversation").inner_text()
    assert XSS in page.locator("#grade").inner_text()
    assert dialogs == []
    page.close()


def test_unknown_rollout_page(browser: Any, site: tuple[str, dict[str, Rollout]]) -> None:
    base, _ = site
    page = browser.new_page()
    resp = page.goto(base + "/rollouts/trace_missing")
    assert resp is not None and resp.status == 404
    assert "No rollout with trace_id trace_missing" in page.inner_text("h1")
    with page.expect_navigation():  # the click starts a page load; read the list once it is there
        page.click("text=the rollout list")
    assert len(shown_ids(page)) == 13
    page.close()

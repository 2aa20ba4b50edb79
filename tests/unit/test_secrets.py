"""arft.secrets: references resolve (or fail naming the field and variable), and what is written
keeps references, masks literals and scrubs resolved values."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from arft.secrets import (MASK, SecretError, check, is_reference, redact, redacting_logs, resolve,
                          resolve_map, scrub)

ENV = {"TOOL_TOKEN": "tok-123456", "SIGNING": "sig-abcdef", "OPENAI_API_KEY": "sk-judge-0000"}


def job(**engine: str) -> dict:
    return {
        "method": {"reinforcement": {
            "tools": [{"type": "endpoint", "name": "lookup",
                       "headers": {"Authorization": "Bearer ${TOOL_TOKEN}", "X-Api-Key": "literal-1"},
                       "signing_secret": "${SIGNING}"},
                      {"type": "mcp", "command": ["srv"], "env": {"GITHUB_TOKEN": "ghp_literal",
                                                                 "LOG_LEVEL": "info"}}],
            "grader": {"type": "multi", "graders": {"e": {"type": "endpoint",
                                                          "headers": {"X": "${MISSING}"}}}}}},
        "engine": {"api_key_env": "OPENAI_API_KEY", **engine},
        "rollout": {"max_tokens": 4096},
    }


def test_resolve_substitutes_and_names_field_and_variable() -> None:
    assert resolve("Bearer ${TOOL_TOKEN}", "headers.Authorization", ENV) == "Bearer tok-123456"
    assert resolve("plain", "f", {}) == "plain"
    with pytest.raises(SecretError, match=r"tool 'x': headers.A references \$\{NOPE\}, which is "
                                          r"not set; export it"):
        resolve_map({"A": "${NOPE}"}, "tool 'x': headers", ENV)
    with pytest.raises(SecretError, match="EMPTY"):
        resolve("${EMPTY}", "f", {"EMPTY": ""})


def test_check_names_the_full_field_path_of_every_missing_variable() -> None:
    with pytest.raises(SecretError) as err:
        check(job(), {})
    lines = str(err.value).splitlines()
    assert lines[0].startswith("method.reinforcement.tools[0].headers.Authorization references "
                               "${TOOL_TOKEN}, which is not set")
    assert any(line.startswith("method.reinforcement.tools[0].signing_secret references ${SIGNING}")
               for line in lines)
    assert any(line.startswith("method.reinforcement.grader.graders.e.headers.X references "
                               "${MISSING}") for line in lines)


def test_check_returns_the_resolved_values_and_named_keys() -> None:
    values = check(job(), {**ENV, "MISSING": "m-value-9"})
    assert values == {"tok-123456", "sig-abcdef", "m-value-9", "sk-judge-0000"}


def test_redact_keeps_references_and_masks_literals() -> None:
    out = redact(job(api_key="sk-literal-key"))
    tool, mcp = out["method"]["reinforcement"]["tools"]
    assert tool["headers"] == {"Authorization": "Bearer ${TOOL_TOKEN}", "X-Api-Key": MASK}
    assert tool["signing_secret"] == "${SIGNING}"
    assert mcp["env"] == {"GITHUB_TOKEN": MASK, "LOG_LEVEL": "info"}
    assert out["engine"] == {"api_key_env": "OPENAI_API_KEY", "api_key": MASK}
    assert out["rollout"] == {"max_tokens": 4096}  # a number under a *token* key is no secret
    assert redact({"training": {"micro_batch_tokens": "auto"}}) == {"training": {"micro_batch_tokens": "auto"}}
    assert redact({"rollout": {"schema_keywords": "lenient"}}) == {"rollout": {"schema_keywords": "lenient"}}
    assert redact({"tests": {"test_token.py": "def test(): ..."}}) == {
        "tests": {"test_token.py": "def test(): ..."}}  # a file path is no secret's name
    assert redact(out) == out  # idempotent


def test_redact_scrubs_resolved_values_everywhere() -> None:
    out = redact({"note": "called with tok-123456 today", "list": ["tok-123456"]}, ["tok-123456"])
    assert out == {"note": f"called with {MASK} today", "list": [MASK]}


@pytest.mark.parametrize("value, expected", [
    ("${A}", True), ("Bearer ${A}", True), ("token ${A}${B}", True), ("x${A}", False),
    ("Bearer abc", False), ("", False)])
def test_is_reference(value: str, expected: bool) -> None:
    assert is_reference(value) is expected


def test_scrub_leaves_short_values_alone() -> None:
    assert scrub("a b abcd", ["a", "abcd"]) == f"a b {MASK}"


def test_redacting_logs_scrubs_messages_and_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("arft.test_secrets")
    with caplog.at_level(logging.INFO):
        with redacting_logs({"tok-123456"}):
            log.info("header is %s", "Bearer tok-123456")
            try:
                raise RuntimeError("failed with tok-123456")
            except RuntimeError:
                log.exception("boom")
        log.info("after: tok-123456")  # the filter is gone after the block
    assert "tok-123456" not in caplog.text.split("after:")[0]
    assert "header is Bearer ***" in caplog.text
    assert "failed with ***" in caplog.text
    assert "after: tok-123456" in caplog.text


def test_the_store_writes_the_job_redacted(tmp_path: Path) -> None:
    from arft.tracing.store import RunStore

    with RunStore(tmp_path / "arft.sqlite") as store:
        store.create_run("r", "eval", job(api_key="sk-literal-key"))
        stored = store.runs()[0]["job"]
    assert stored == redact(job(api_key="sk-literal-key"))
    assert b"literal" not in (tmp_path / "arft.sqlite").read_bytes()


def test_every_component_resolves_its_own_references(monkeypatch: pytest.MonkeyPatch) -> None:
    """Built outside a run (``arft grader audit``, a notebook), each still resolves its fields."""
    from arft.config import McpToolSpec, OpenAIEngineSpec
    from arft.config.builtin_graders import TestsPassSpec
    from arft.config.graders import ScoreModelSpec
    from arft.engines.openai_engine import OpenAIEngine
    from arft.graders.base import GraderError
    from arft.graders.builtins.tests_pass import TestsPassGrader
    from arft.graders.judge import JudgeClient
    from arft.tools.mcp import McpServer

    monkeypatch.setenv("MY_KEY", "key-value-1")
    monkeypatch.delenv("UNSET_KEY", raising=False)
    engine = OpenAIEngine.from_spec("m", OpenAIEngineSpec(type="openai", base_url="http://h/v1",
                                                    api_key="${MY_KEY}"))
    assert engine._headers == {"Authorization": "Bearer key-value-1"}
    spec = ScoreModelSpec(type="score_model", model="judge", input=[], api_key="${MY_KEY}")
    assert JudgeClient.from_fields(spec, "judge", None)._headers["Authorization"].endswith("key-value-1")
    with pytest.raises(GraderError, match=r"judge 'judge': api_key references \$\{UNSET_KEY\}"):
        JudgeClient.from_fields(spec.model_copy(update={"api_key": "${UNSET_KEY}"}), "judge", None)
    assert McpServer(McpToolSpec(type="mcp", command=["x"], env={"T": "${MY_KEY}"})).env == {
        "T": "key-value-1"}
    tests_pass = TestsPassSpec(type="builtin", name="tests_pass", env={"T": "${MY_KEY}"})
    assert TestsPassGrader(tests_pass, Path(".")).env == {"T": "key-value-1"}

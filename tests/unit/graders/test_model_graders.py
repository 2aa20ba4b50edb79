"""score_model and label_model against a real scripted OpenAI-compatible judge on 127.0.0.1.

``FakeJudge`` and the ``judge`` fixture are also used by the fact_recall and judge_hack tests.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from arft.graders.base import GraderError, build_sample
from arft.graders.judge import parse_json_reply
from arft.graders.registry import build_grader
from arft.records import Score
from tests.servers import serve

from .helpers import make_rollout

Reply = str | tuple[int, str]
"""A scripted answer: the assistant's content (HTTP 200), or ``(status, error message)``."""


class FakeJudge:
    """A scripted ``/v1/chat/completions``: answers ``replies`` in turn, records each request."""

    def __init__(self) -> None:
        self.url = ""
        self.replies: list[Reply] = []
        self.requests: list[dict[str, Any]] = []
        self.auth: list[str | None] = []

    def reset(self, *replies: Reply) -> "FakeJudge":
        self.replies = list(replies)
        self.requests.clear()
        self.auth.clear()
        return self

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def completions(request: Request) -> Any:
            self.requests.append(await request.json())
            self.auth.append(request.headers.get("authorization"))
            # Unscripted calls fail with a 4xx (not retried) so a test sees them at once.
            reply = self.replies.pop(0) if self.replies else (400, "unscripted judge call")
            if isinstance(reply, tuple):
                return JSONResponse({"error": {"message": reply[1]}}, status_code=reply[0])
            return {"id": "chatcmpl-1", "object": "chat.completion", "model": "judge",
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": reply}}]}

        return app

    def text_of(self, request: int = -1) -> str:
        """Every message content of one request, joined (for 'the prompt shows X' checks)."""
        return "\n".join(m["content"] for m in self.requests[request]["messages"])


@pytest.fixture(scope="module")
def judge_server() -> Iterator[FakeJudge]:
    fake = FakeJudge()
    with serve(fake.app()) as url:
        fake.url = url + "/v1"
        yield fake


@pytest.fixture
def judge(judge_server: FakeJudge, monkeypatch: pytest.MonkeyPatch) -> FakeJudge:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("JUDGE_KEY", "sk-judge")
    return judge_server.reset()


def structured(result: Any) -> str:
    return json.dumps({"steps": [{"description": "read it", "conclusion": "fine"}],
                       "result": result})


def score_spec(judge: FakeJudge, **extra: Any) -> dict[str, Any]:
    return {"type": "score_model", "name": "quality", "model": "judge-1",
            "input": [{"role": "system", "content": "Grade answers to: {{ item.id }}."},
                      {"role": "user", "content": "Expected {{ item.answer }}; got "
                                                  "{{ sample.output_text }}"}],
            "base_url": judge.url, "api_key_env": "JUDGE_KEY", "backoff_s": 0.01, **extra}


def label_spec(judge: FakeJudge, **extra: Any) -> dict[str, Any]:
    return {"type": "label_model", "name": "tone", "model": "judge-1",
            "input": [{"role": "user", "content": "Tone of: {{ sample.output_text }}"}],
            "labels": ["professional", "casual", "rude"], "passing_labels": ["professional"],
            "base_url": judge.url, "api_key_env": "JUDGE_KEY", "backoff_s": 0.01, **extra}


async def grade(spec: dict[str, Any], tmp_path: Path, answer: str = "It is Paris.",
                **rollout_fields: Any) -> Score:
    """Build the grader, grade one rollout, close the grader's connections."""
    rollout = make_rollout(answer=answer, **rollout_fields)
    grader = build_grader(spec, tmp_path)
    try:
        return await grader.grade(build_sample(rollout), rollout.item)
    finally:
        await grader.aclose()  # type: ignore[attr-defined]


# ------------------------------------------------------------------------------- score_model

async def test_score_model_sends_rendered_messages_and_schema(judge: FakeJudge,
                                                              tmp_path: Path) -> None:
    judge.reset(structured(0.8))
    spec = score_spec(judge, pass_threshold=0.5, sampling_params={
        "temperature": 0, "top_p": 0.5, "max_completions_tokens": 300, "seed": 3,
        "reasoning_effort": "low"})
    score = await grade(spec, tmp_path)
    assert score == Score(score=0.8, passed=True, grader="quality")
    [body] = judge.requests
    assert judge.auth == ["Bearer sk-judge"]
    assert body["model"] == "judge-1"
    system, user = body["messages"]
    assert system["role"] == "system" and system["content"].startswith("Grade answers to: t1.\n\n")
    assert '"result": <a number from 0.0 to 1.0>' in system["content"]
    assert user == {"role": "user", "content": "Expected Paris; got It is Paris."}
    assert {k: body[k] for k in ("temperature", "top_p", "max_completion_tokens", "seed",
                                 "reasoning_effort")} == {
        "temperature": 0, "top_p": 0.5, "max_completion_tokens": 300, "seed": 3,
        "reasoning_effort": "low"}
    assert "max_tokens" not in body and "tools" not in body
    fmt = body["response_format"]
    assert fmt["type"] == "json_schema"
    schema = fmt["json_schema"]["schema"]
    assert schema["properties"]["result"] == {"type": "number"}
    assert set(schema["required"]) == {"steps", "result"}
    assert schema["properties"]["steps"]["items"]["required"] == ["description", "conclusion"]


async def test_score_model_without_system_message_or_instructions(judge: FakeJudge,
                                                                  tmp_path: Path) -> None:
    judge.reset(structured(1), structured(1))
    user_only = [{"role": "user", "content": [{"type": "input_text", "text": "A: {{ sample.output_text }}"}]}]
    await grade(score_spec(judge, input=user_only), tmp_path)
    await grade(score_spec(judge, input=user_only, output_instructions=False), tmp_path)
    first, second = (r["messages"] for r in judge.requests)
    assert [m["role"] for m in first] == ["system", "user"] and '"result"' in first[0]["content"]
    assert second == [{"role": "user", "content": "A: It is Paris."}]
    assert all(k not in judge.requests[0] for k in ("temperature", "seed"))  # unset: not sent


@pytest.mark.parametrize("reply, expected", [
    ("0.25", 0.25),  # a server that ignores response_format and answers a bare number
    (" 1 \n", 1.0),
    ('{"result": 0.4}', 0.4),  # plain JSON without steps
    ('Sure! ```json\n{"steps": [], "result": 0.6}\n```', 0.6),
    ('Verdict: {"result": "0.7", "steps": []} done', 0.7),
])
async def test_score_model_reads_unstructured_replies(judge: FakeJudge, tmp_path: Path,
                                                      reply: str, expected: float) -> None:
    judge.reset(reply)
    score = await grade(score_spec(judge), tmp_path)
    assert score.error is None and score.score == pytest.approx(expected)
    assert score.passed is None  # no pass_threshold


@pytest.mark.parametrize("reply, reason", [
    ("The answer looks good to me.", "not a number: 'The answer looks good to me.'"),
    (structured("excellent"), "not a number: 'excellent'"),
    (structured(True), "not a number: 'True'"),
    (structured(None), "not a number"),
    ('{"steps": [], "score": 0.5}', "has no 'result' key"),
    ("", "not a number"),
])
async def test_score_model_non_numeric_is_an_error_score(judge: FakeJudge, tmp_path: Path,
                                                         reply: str, reason: str) -> None:
    judge.reset(reply)
    score = await grade(score_spec(judge, pass_threshold=0.5), tmp_path)
    assert score.score == 0.0 and score.passed is None
    assert score.error is not None and score.error.startswith("quality: ")
    assert reason in score.error


@pytest.mark.parametrize("result, expected", [(14, 10.0), (-3, 0.0), (7.5, 7.5)])
async def test_score_model_clips_to_range(judge: FakeJudge, tmp_path: Path, result: float,
                                          expected: float) -> None:
    judge.reset(structured(result))
    score = await grade(score_spec(judge, range=[0, 10], pass_threshold=7), tmp_path)
    assert score.score == expected and score.error is None
    assert score.passed is (expected >= 7)
    assert "from 0.0 to 10.0" in judge.requests[0]["messages"][0]["content"]


async def test_score_model_retries_server_errors(judge: FakeJudge, tmp_path: Path) -> None:
    judge.reset((500, "overloaded"), (503, "still overloaded"), structured(0.9))
    score = await grade(score_spec(judge), tmp_path)
    assert score.score == 0.9 and score.error is None
    assert len(judge.requests) == 3


async def test_score_model_gives_up_after_max_retries(judge: FakeJudge, tmp_path: Path) -> None:
    judge.reset((500, "down"), (500, "down"), structured(1))
    score = await grade(score_spec(judge, max_retries=1), tmp_path)
    assert score.score == 0.0 and len(judge.requests) == 2
    assert score.error is not None and "HTTP 500: down" in score.error


async def test_score_model_4xx_is_an_error_score_at_once(judge: FakeJudge, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JUDGE_KEY")
    judge.reset((401, "invalid api key"), structured(1))
    score = await grade(score_spec(judge), tmp_path)
    assert score.score == 0.0 and len(judge.requests) == 1  # not retried
    assert judge.auth == [None]
    assert score.error is not None and score.error.startswith("quality: judge 'judge-1' failed")
    assert "HTTP 401: invalid api key" in score.error and "$JUDGE_KEY is not set" in score.error


async def test_score_model_template_error_is_an_error_score(judge: FakeJudge,
                                                            tmp_path: Path) -> None:
    spec = score_spec(judge, input=[{"role": "user", "content": "{{ item.rubric }}"}])
    score = await grade(spec, tmp_path)
    assert score.score == 0.0 and judge.requests == []
    assert score.error is not None and "item has no key 'rubric'" in score.error


async def test_base_url_from_environment(judge: FakeJudge, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", judge.url)
    judge.reset(structured(0.5))
    spec = score_spec(judge)
    del spec["base_url"]
    assert (await grade(spec, tmp_path)).score == 0.5


@pytest.mark.parametrize("change, field", [
    ({"model": None}, "field 'model'"),
    ({"range": [1, 0]}, "field 'range'"),
    ({"input": []}, "field 'input'"),
    ({"input": [{"role": "tool", "content": "x"}]}, "field 'input.0.role'"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "text": "x"}]}]},
     "field 'input.0.content'"),
    ({"sampling_params": {"temprature": 0}}, "field 'sampling_params.temprature'"),
    ({"max_retries": -1}, "field 'max_retries'"),
    ({"pass_treshold": 0.5}, "did you mean 'pass_threshold'"),
])
def test_score_model_bad_specs_name_the_field(judge: FakeJudge, tmp_path: Path,
                                              change: dict[str, Any], field: str) -> None:
    spec = {**score_spec(judge), **change}
    spec = {k: v for k, v in spec.items() if v is not None}
    with pytest.raises(GraderError, match="quality") as err:
        build_grader(spec, tmp_path)
    assert field in str(err.value)


# ------------------------------------------------------------------------------- label_model

@pytest.mark.parametrize("reply, score, passed", [
    (structured("professional"), 1.0, True),
    (structured("casual"), 0.0, False),
    ("rude", 0.0, False),  # a bare label from a server that ignores response_format
    ('"Professional."', 1.0, True),  # quotes, case and a full stop are forgiven
])
async def test_label_model_scores_passing_labels(judge: FakeJudge, tmp_path: Path, reply: str,
                                                 score: float, passed: bool) -> None:
    judge.reset(reply)
    result = await grade(label_spec(judge), tmp_path)
    assert result == Score(score=score, passed=passed, grader="tone")
    [body] = judge.requests
    schema = body["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["result"] == {"type": "string",
                                              "enum": ["professional", "casual", "rude"]}
    system, user = body["messages"]
    assert "one of: professional, casual, rude" in system["content"]
    assert user == {"role": "user", "content": "Tone of: It is Paris."}


@pytest.mark.parametrize("reply", [structured("sarcastic"), structured(1), "I cannot tell."])
async def test_label_model_off_label_is_an_error_score(judge: FakeJudge, tmp_path: Path,
                                                       reply: str) -> None:
    judge.reset(reply)
    score = await grade(label_spec(judge), tmp_path)
    assert score.score == 0.0 and score.passed is None
    assert score.error is not None and "not one of the labels" in score.error


async def test_label_model_server_error_is_an_error_score(judge: FakeJudge,
                                                          tmp_path: Path) -> None:
    judge.reset((404, "model judge-1 not found"))
    score = await grade(label_spec(judge), tmp_path)
    assert score.score == 0.0 and score.error is not None
    assert "model judge-1 not found" in score.error


@pytest.mark.parametrize("change, field", [
    ({"passing_labels": ["polite"]}, "field 'passing_labels'"),
    ({"labels": []}, "field 'labels'"),
    ({"labels": ["a", "a"], "passing_labels": ["a"]}, "field 'labels'"),
    ({"range": [0, 1]}, "field 'range'"),  # a score_model field on a label_model
])
def test_label_model_bad_specs_name_the_field(judge: FakeJudge, tmp_path: Path,
                                              change: dict[str, Any], field: str) -> None:
    with pytest.raises(GraderError, match="tone") as err:
        build_grader({**label_spec(judge), **change}, tmp_path)
    assert field in str(err.value)


def test_parse_json_reply() -> None:
    assert parse_json_reply('{"a": 1}') == {"a": 1}
    assert parse_json_reply("```\n[1, 2]\n```") == [1, 2]
    assert parse_json_reply('text {"result": 2} text') == {"result": 2}
    assert parse_json_reply("no json here") is None

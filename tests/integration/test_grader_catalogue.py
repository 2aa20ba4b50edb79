"""Every grader type through `arft grade` and inside `arft eval` (real local servers for the
endpoint grader and an OpenAI-compatible judge; the python grader in its sandbox)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request
from typer.testing import CliRunner

from arft.cli.main import app as cli
from tests.servers import serve

ANSWER = "The files are a.py and b.py. 42"
ITEM = {"answer": "42", "files": ["a.py", "b.py"], "facts": ["a.py", "42"]}
JUDGE_REPLIES = {"score-judge": {"result": 0.7, "steps": []}, "label-judge": {"result": "good", "steps": []},
                 "hack-judge": {"result": [], "steps": []}}


def servers_app() -> FastAPI:
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def judge(req: Request) -> dict[str, Any]:
        body = await req.json()
        content = json.dumps(JUDGE_REPLIES[body["model"]])
        return {"id": "x", "object": "chat.completion", "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant",
                                                                              "content": content}}]}

    @app.post("/grade")
    async def grade(req: Request) -> dict[str, Any]:
        body = await req.json()
        return {"score": 0.25 if body["item"]["answer"] == "42" else 0.0}

    return app


def specs(url: str) -> dict[str, tuple[dict[str, Any], float]]:
    """Grader spec -> the score it must give ANSWER on ITEM."""
    judge = {"base_url": f"{url}/v1", "api_key_env": "ARFT_TEST_NO_KEY"}
    check = {"type": "string_check", "name": "check", "input": "{{ sample.output_text }}",
             "reference": "{{ item.answer }}", "operation": "like"}
    similar = {"type": "text_similarity", "name": "sim", "input": "{{ sample.output_text }}",
               "reference": ANSWER, "evaluation_metric": "fuzzy_match"}
    return {
        "string_check": (check, 1.0),
        "text_similarity": (similar, 1.0),
        "python": ({"type": "python", "name": "py", "source":
                    "def grade(sample, item):\n    return 1.0 if item['answer'] in sample['output_text'] else 0.0\n"},
                   1.0),
        "multi": ({"type": "multi", "name": "m", "graders": {"a": check, "b": similar},
                   "calculate_output": "0.5 * a + 0.5 * b"}, 1.0),
        "endpoint": ({"type": "endpoint", "name": "ep", "url": f"{url}/grade"}, 0.25),
        "score_model": ({"type": "score_model", "name": "sm", "model": "score-judge",
                         "input": [{"role": "user", "content": "Rate: {{ sample.output_text }}"}], **judge}, 0.7),
        "label_model": ({"type": "label_model", "name": "lm", "model": "label-judge", "labels": ["good", "bad"],
                         "passing_labels": ["good"],
                         "input": [{"role": "user", "content": "Label: {{ sample.output_text }}"}], **judge}, 1.0),
        "set_f1": ({"type": "builtin", "name": "set_f1", "predicted": ["a.py", "c.py"],
                    "reference": "{{ item.files }}"}, 0.5),
        "fact_recall": ({"type": "builtin", "name": "fact_recall", "facts": "{{ item.facts }}",
                         "mode": "string"}, 1.0),
        "style_penalty": ({"type": "builtin", "name": "style_penalty"}, 1.0),
        "tool_budget": ({"type": "builtin", "name": "tool_budget", "budget": 2}, 1.0),
        "verification_bonus": ({"type": "builtin", "name": "verification_bonus"}, 0.0),
        "ast_guard": ({"type": "builtin", "name": "ast_guard", "code": "def solve(x):\n    return x * 2\n",
                       "required_function": "solve"}, 1.0),
        "judge_hack_check": ({"type": "builtin", "name": "judge_hack_check", "grader": check,
                              "model": "hack-judge", **judge}, 1.0),
    }


@pytest.fixture(scope="module")
def url() -> Any:
    with serve(servers_app()) as base:
        yield base


@pytest.mark.parametrize("kind", list(specs("http://x")))
def test_every_type_through_arft_grade(kind: str, url: str, tmp_path: Path) -> None:
    spec, expected = specs(url)[kind]
    out = CliRunner().invoke(cli, ["grade", "--grader", json.dumps(spec), "--item", json.dumps(ITEM),
                                   "--model-sample", ANSWER, "--json"])
    assert out.exit_code == 0, out.output
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["error"] is None, result
    assert result["score"] == pytest.approx(expected, abs=1e-6), result


async def test_every_type_inside_arft_eval(url: str, tmp_path: Path, tokenizer: Any) -> None:
    """One multi grader with every type as a child, graded inside a real eval run."""
    from arft.config import load_job
    from arft.engines.scripted import ScriptedEngine
    from arft.app.evaluate import evaluate
    from arft.data.splits import load_split

    children = {k: s for k, (s, _) in specs(url).items()}
    expected = {k: e for k, (_, e) in specs(url).items()}
    weights = " + ".join(f"{k}" for k in children)
    (tmp_path / "val.jsonl").write_text(json.dumps({"messages": [{"role": "user", "content": "Which files?"}],
                                                    **ITEM}) + "\n")
    job = {"training_file": "val.jsonl", "method": {"type": "reinforcement", "reinforcement": {
        "grader": {"type": "multi", "name": "all", "graders": children, "calculate_output": weights}}}}
    (tmp_path / "job.json").write_text(json.dumps(job))
    loaded = load_job(tmp_path / "job.json")
    engine = ScriptedEngine(tokenizer, lambda _ids: ANSWER + "<|im_end|>")
    result = await evaluate(loaded, load_split(loaded, "validation", None), 2, tmp_path / "run", engine=engine)
    for r in result.rollouts:
        assert r.score is not None and r.score.error is None, r.score
        for k, e in expected.items():
            assert r.score.sub_scores[k] == pytest.approx(e, abs=1e-6), (k, r.score.sub_scores)
        assert r.score.score == pytest.approx(sum(expected.values()), abs=1e-6)

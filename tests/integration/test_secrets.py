"""No secret reaches a run's artefacts: an eval and a short train with a tiny model, a real HTTP
tool and grader server on 127.0.0.1, secrets planted both as literals and as ``${ENV}``
references; then every byte of the run directories (SQLite, metrics.jsonl, TensorBoard, MLflow,
the report, the export, the viewer's pages and API) and of the captured stdout, stderr and logs is
searched for them: 0 hits. The server proves the secrets were really sent, and every request
signed."""

from __future__ import annotations

import json
import logging
import secrets
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from arft.app.evaluate import evaluate
from arft.app.train import train
from arft.cli.main import app as cli
from arft.config import load_job
from arft.data.splits import load_split
from arft.engines.transformers.engine import TransformersEngine
from arft.report.viewer import create_app
from arft.secrets import SecretError
from arft.signing import SIGNATURE_HEADER, ReplayCache, SignatureError, verify_request
from arft.tools.endpoint import EndpointTool
from tests.servers import serve, tool_output
from tests.training import write_datasets

PLANTED = {name: f"{name.lower()}-{secrets.token_hex(12)}"
           for name in ("TOOL_TOKEN", "TOOL_LITERAL", "GRADER_TOKEN", "GRADER_LITERAL", "SIGNING")}
"""Every secret of the job: three from the environment, two written literally in the job."""


def secret_server(seen: dict[str, list[Any]]) -> FastAPI:
    """/lookup (tool) and /grade (grader): each checks the signature and records the headers."""
    app, cache = FastAPI(), ReplayCache()

    async def checked(request: Request, route: str) -> dict[str, Any] | JSONResponse:
        raw = await request.body()
        try:
            verify_request(raw, request.headers.get(SIGNATURE_HEADER), PLANTED["SIGNING"],
                           replay_cache=cache)
        except SignatureError as e:
            seen["rejected"].append(str(e))
            return JSONResponse({"detail": "bad signature"}, status_code=401)
        seen[route].append({k: request.headers.get(k) for k in ("authorization", "x-api-key")})
        return json.loads(raw)

    @app.post("/lookup")
    async def lookup(request: Request) -> Any:
        body = await checked(request, "lookup")
        return body if isinstance(body, JSONResponse) else tool_output(body, "value-7")

    @app.post("/grade")
    async def grade(request: Request) -> Any:
        body = await checked(request, "grade")
        return body if isinstance(body, JSONResponse) else {"score": len(body["sample"]["output_text"]) % 5 / 4}

    return app


def write_job(folder: Path, url: str) -> Path:
    folder.mkdir()
    write_datasets(folder, 4, 2)
    job = {"model": "smollm2-135m-instruct", "training_file": "train.jsonl",
           "validation_file": "val.jsonl", "seed": 1,
           "method": {"type": "reinforcement", "reinforcement": {
               "grader": {"type": "endpoint", "name": "remote", "url": f"{url}/grade",
                          "headers": {"Authorization": "Bearer ${GRADER_TOKEN}",
                                      "X-Api-Key": PLANTED["GRADER_LITERAL"]},
                          "signing_secret": "${SIGNING}"},
               "tools": [{"name": "lookup", "server_url": f"{url}/lookup",
                          "parameters": {"type": "object", "properties": {"key": {"type": "string"}}},
                          "headers": {"Authorization": "Bearer ${TOOL_TOKEN}",
                                      "X-Api-Key": PLANTED["TOOL_LITERAL"]},
                          "signing_secret": "${SIGNING}"}],
               "max_episode_steps": 2,
               "hyperparameters": {"batch_size": 2, "eval_interval": 1, "eval_samples": 1}}},
           "sampling": {"max_new_tokens": 24},
           "rollout": {"max_turns": 2, "max_tokens": 1024, "tool_choice": "required"},
           "training": {"group_size": 2, "max_steps": 1, "checkpoint_every": 1,
                        "micro_batch_size": 4, "bf16_autocast": False, "lora": {"r": 4, "alpha": 8}},
           "logging": {"tensorboard": True, "mlflow": {"experiment": "secrets"}}}
    (folder / "job.json").write_text(json.dumps(job))
    return folder / "job.json"


def artefacts(run_dir: Path) -> list[str]:
    """What the report, the export and the viewer make of a run (written into the run dir too)."""
    runner = CliRunner()
    outputs = [runner.invoke(cli, ["report", str(run_dir)]).output,
               runner.invoke(cli, ["export", str(run_dir), "--out", str(run_dir / "export.jsonl")]).output]
    client = TestClient(create_app(run_dir))
    listing = client.get("/api/rollouts")
    outputs += [client.get("/").text, listing.text]
    for row in listing.json()["rollouts"]:
        outputs += [client.get(f"/api/rollouts/{row['trace_id']}").text,
                    client.get(f"/rollouts/{row['trace_id']}").text]
    return outputs


def hits(data: bytes) -> list[str]:
    return [name for name, value in PLANTED.items() if value.encode() in data]


async def test_no_secret_in_any_artefact_and_every_request_carried_them(
        tmp_path: Path, tokenizer: Any, tiny_model: Any, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("mlflow", reason="mlflow-skinny is in the tracking extra: run make setup")
    from arft.models.loading import tiny_model as build_tiny

    for name in ("TOOL_TOKEN", "GRADER_TOKEN", "SIGNING"):
        monkeypatch.setenv(name, PLANTED[name])
    seen: dict[str, list[Any]] = {"lookup": [], "grade": [], "rejected": []}
    caplog.set_level(logging.DEBUG)
    with serve(secret_server(seen)) as url:
        job = load_job(write_job(tmp_path / "job", url))
        engine = TransformersEngine(tiny_model, tokenizer, max_batch_size=8)
        try:
            result = await evaluate(job, load_split(job, "validation", None), 2, tmp_path / "eval",
                                    engine=engine)
        finally:
            await engine.aclose()
        trained = await train(job, tmp_path / "train", model=build_tiny(tokenizer, seed=2),
                              tokenizer=tokenizer, max_batch_size=4)
    outputs = artefacts(tmp_path / "eval") + artefacts(tmp_path / "train")

    assert len(result.rollouts) == 4 and trained.steps == 1
    assert all(r.score is not None and r.score.error is None for r in result.rollouts)
    # the secrets were used: every tool call and grade carried the resolved values, signed
    assert seen["rejected"] == []
    assert len(seen["lookup"]) >= 4 and len(seen["grade"]) >= 4 + 2 * 2
    assert all(h == {"authorization": f"Bearer {PLANTED['TOOL_TOKEN']}",
                     "x-api-key": PLANTED["TOOL_LITERAL"]} for h in seen["lookup"])
    assert all(h == {"authorization": f"Bearer {PLANTED['GRADER_TOKEN']}",
                     "x-api-key": PLANTED["GRADER_LITERAL"]} for h in seen["grade"])
    # ... and are nowhere in what the runs wrote (the search does find the job file's literals)
    assert hits((tmp_path / "job" / "job.json").read_bytes()) == ["TOOL_LITERAL", "GRADER_LITERAL"]
    files = [p for d in ("eval", "train") for p in (tmp_path / d).rglob("*") if p.is_file()]
    assert any(p.name == "arft.sqlite" for p in files) and any("mlflow" in p.name for p in files)
    assert any(p.name == "report.html" for p in files) and any(p.name == "export.jsonl" for p in files)
    found = {str(p.relative_to(tmp_path)): hits(p.read_bytes()) for p in files}
    assert {p: h for p, h in found.items() if h} == {}
    captured = capfd.readouterr()
    everything = "\n".join([*outputs, captured.out, captured.err, caplog.text])
    assert hits(everything.encode()) == []
    # the store keeps the references, and a literal as ***
    stored = (tmp_path / "eval" / "arft.sqlite").read_bytes()
    assert b"Bearer ${TOOL_TOKEN}" in stored and b"${SIGNING}" in stored and b'"***"' in stored


def test_a_missing_variable_is_refused_before_the_run_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TOOL_TOKEN", "GRADER_TOKEN", "SIGNING"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GRADER_TOKEN", "x-grader")
    monkeypatch.setenv("SIGNING", "x-signing")
    path = write_job(tmp_path / "job", "http://127.0.0.1:9")
    raw = json.loads(path.read_text())  # a served model: nothing is loaded even if the check failed
    raw["engine"] = {"type": "openai", "base_url": "http://127.0.0.1:9/v1", "served_model": "m"}
    path.write_text(json.dumps(raw))
    out = CliRunner().invoke(cli, ["eval", str(path), "--out", str(tmp_path / "run")])
    assert out.exit_code != 0
    assert ("method.reinforcement.tools[0].headers.Authorization references ${TOOL_TOKEN}, "
            "which is not set") in " ".join(out.output.split())
    assert not (tmp_path / "run" / "arft.sqlite").exists()
    with pytest.raises(SecretError, match=r"endpoint tool 'lookup': headers.Authorization "
                                          r"references \$\{TOOL_TOKEN\}"):
        EndpointTool(load_job(path).rl.tools[0])  # built alone, a tool resolves its own

"""`arft serve RUN_DIR|MODEL`: the tuned agent (and its base) behind an OpenAI-compatible API.

Thin command over ``arft.app.serve``: load the models (with progress), check the port, print
where it listens and what it serves, run uvicorn until Ctrl-C. Heavy imports (torch,
transformers, fastapi, uvicorn) happen inside the command.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import typer

from arft.cli.console import console, err, fail
from arft.serving import port_problem

SHUTDOWN_GRACE_S = 3
"""Seconds requests under way get to finish once the server is told to stop."""


def serve_cmd(
    target: str = typer.Argument(..., help="A run directory (arft train / arft sft), or a model: "
                                 "smollm2-135m-instruct, an HF id, a local directory, a .gguf file."),
    name: str = typer.Option(None, help="The tuned model's name in the API (default: the run "
                             "directory's name; for a plain model: TARGET)."),
    base: bool = typer.Option(True, help="Also serve the base model under the job's model name "
                              "(a run directory only); --no-base saves its memory."),
    host: str = typer.Option("127.0.0.1", help="Address to listen on (default: this machine only)."),
    port: int = typer.Option(8000, help="Port to listen on."),
    api_key_env: str = typer.Option(None, help="Require `Authorization: Bearer <key>`, the key read "
                                    "from this environment variable."),
    max_tokens: int = typer.Option(1024, help="Default and most tokens of one reply."),
    constrain: bool = typer.Option(None, "--constrain/--no-constrain", help="Hold every tool call "
                                   "to its schema (default: as the run was trained; on for a model)."),
    dtype: str = typer.Option(None, help="auto, bfloat16, float32, float16 (default: the run's engine.dtype)."),
    device: str = typer.Option(None, help="cpu, cuda, cuda:1 (default: the run's engine.device)."),
    engine_type: str = typer.Option("transformers", "--engine", help="transformers (streams token by "
                                    "token, any machine) or vllm (a vLLM server arft starts from "
                                    ".venv-vllm; `make setup-vllm`)."),
) -> None:
    """Serve a tuned agent with an OpenAI-compatible /v1/chat/completions (tools, streaming)."""
    import uvicorn

    from arft.app.serve.fingerprint import stamp_of
    from arft.app.serve.models import served_models
    from arft.app.serve.server import build_app

    key = _api_key(api_key_env)
    problem = port_problem(host, port, "another `arft serve`?")
    if problem:
        fail(problem)
    engine = _engine_spec(dtype, device)
    with err.status("loading") as status:
        models = served_models(target, name=name, base=base, engine=engine, engine_type=engine_type,
                               max_tokens=max_tokens, constrain=constrain,
                               on_status=lambda s: status.update(s))
    for m in models:
        stamp = stamp_of(m.engine)  # the weights its answers name (system_fingerprint, x-arft-policy)
        weights = f", weights {stamp.hash} of step {stamp.version}" if stamp else ""
        console.print(f"serving [bold]{m.name}[/]  (tool calls {'constrained' if m.constrain else 'free'}{weights})")
    auth = f", bearer key from ${api_key_env}" if key else ""
    console.print(f"OpenAI-compatible API at [bold]http://{host}:{port}/v1[/]{auth}  (Ctrl-C to stop)")
    _log_requests()
    # Ctrl-C or SIGTERM: requests under way get a few seconds, then are cancelled (uvicorn would
    # otherwise wait for them without end), and the engines stop after their current step.
    uvicorn.run(build_app(models, key), host=host, port=port, log_level="warning", access_log=False,
                timeout_graceful_shutdown=SHUTDOWN_GRACE_S)
    asyncio.run(_close(models))


def _log_requests() -> None:
    """One line per request on stderr (``arft.app.serve.access``), in place of uvicorn's own."""
    import logging

    from arft.app.serve.access import ACCESS_LOGGER

    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    logger = logging.getLogger(ACCESS_LOGGER)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)


async def _close(models: Any) -> None:
    for m in models:
        await m.engine.aclose()


def _engine_spec(dtype: str | None, device: str | None) -> Any:
    """A ``TransformersEngineSpec`` with --dtype/--device, or None (the run's or the defaults)."""
    from pydantic import ValidationError

    from arft.config import TransformersEngineSpec

    if not (dtype or device):
        return None
    try:
        return TransformersEngineSpec(**{k: v for k, v in (("dtype", dtype), ("device", device)) if v})
    except ValidationError as e:  # the options' values, checked as the job's engine section is
        fail(f"--dtype/--device: {e}")


def _api_key(env: str | None) -> str | None:
    """The bearer key from the variable ``env`` names (None: no key asked for)."""
    if not env:
        return None
    key = os.environ.get(env)
    if not key:
        fail(f"--api-key-env {env}: that environment variable is not set (or empty); export it "
             "first, or leave the option out to serve without a key")
    return key

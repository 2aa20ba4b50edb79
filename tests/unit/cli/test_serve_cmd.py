"""`arft serve`'s checks before it loads anything: a missing key variable, a busy port, a target
that is neither a run directory nor a model (the server itself: tests/integration/test_serve.py,
and as a process: tests/e2e/test_serve_process.py)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.unit.cli.runner import flat, invoke


def test_a_missing_key_variable_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ARFT_TEST_SERVE_KEY", raising=False)
    out = invoke("serve", "smollm2-135m-instruct", "--api-key-env", "ARFT_TEST_SERVE_KEY")
    assert out.exit_code == 2
    assert "--api-key-env ARFT_TEST_SERVE_KEY: that environment variable is not set" in flat(out.stderr)


def test_a_busy_port_is_refused_before_loading() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        out = invoke("serve", "smollm2-135m-instruct", "--port", str(port))
    assert out.exit_code == 2 and f"port {port} on 127.0.0.1 is already in use" in flat(out.stderr)


def test_a_target_that_is_no_run_and_no_model_says_how_to_get_it(tmp_path: Path) -> None:
    out = invoke("serve", "no-such-model-here", "--port", "0")
    assert out.exit_code == 2 and "model 'no-such-model-here' is neither 'smollm2-135m-instruct'" in flat(out.stderr)


def test_a_bad_dtype_is_named() -> None:
    out = invoke("serve", "smollm2-135m-instruct", "--dtype", "int3", "--port", "0")
    assert out.exit_code == 2 and "--dtype/--device" in flat(out.stderr)


def test_an_engine_that_cannot_serve_is_named() -> None:
    out = invoke("serve", "smollm2-135m-instruct", "--engine", "tgi", "--port", "0")
    assert out.exit_code == 2 and "engine 'tgi' cannot serve: use transformers or vllm" in flat(out.stderr)


def test_without_vllm_the_vllm_engine_says_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no .venv-vllm here, and this interpreter has no vllm
    out = invoke("serve", "smollm2-135m-instruct", "--engine", "vllm", "--port", "0")
    assert out.exit_code == 2 and "needs vLLM: run `make setup-vllm`" in flat(out.stderr)

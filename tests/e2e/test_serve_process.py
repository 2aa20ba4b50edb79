"""`arft serve` as a user starts it: a process serving the real embedded model, called with the
official openai client (marked: loads the real weights)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from arft.serving import free_port

ROOT = Path(__file__).parents[2]
CALCULATOR = {"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string", "maxLength": 30}},
                   "required": ["expression"]}}}


@pytest.mark.embedded
def test_arft_serve_answers_the_openai_client_with_a_valid_tool_call(tmp_path: Path) -> None:
    port = free_port()
    # One OpenMP thread: the suite's workers share two cores, and there two threads that wait
    # for each other at every op made this 48-token reply take ~100 s instead of ~5 s (measured)
    env = {**os.environ, "ARFT_E2E_KEY": "sk-e2e", "OMP_NUM_THREADS": "1"}
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "arft.cli.main", "serve", "smollm2-135m-instruct",
                             "--port", str(port), "--api-key-env", "ARFT_E2E_KEY", "--max-tokens", "64"],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "arft serve did not start within 120 s"
            time.sleep(0.1)  # a refused connection is cheap: the request goes as soon as it can
        c = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-e2e", max_retries=0)
        r = c.chat.completions.create(model="smollm2-135m-instruct", tools=[CALCULATOR], tool_choice="required",
                                      messages=[{"role": "user", "content": "What is 84 * 20?"}], max_tokens=48,
                                      temperature=0.7, seed=1)
        call = r.choices[0].message.tool_calls[0]
        assert r.choices[0].finish_reason == "tool_calls" and call.function.name == "calculator"
        assert isinstance(json.loads(call.function.arguments)["expression"], str)  # constrained: valid by schema
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
    assert "serving smollm2-135m-instruct" in (tmp_path / "serve.log").read_text()

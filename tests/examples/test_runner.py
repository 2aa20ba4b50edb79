"""examples/run.py: one command per example, which starts the example's services around arft."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import httpx
import pytest
from arft.pyfile import load_file

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def runner() -> ModuleType:
    return load_file(EXAMPLES / "run.py", "examples_run")


def test_arft_command_puts_the_job_after_the_command() -> None:
    run = runner()
    job = str(EXAMPLES / "finance_lookup" / "job.yaml")
    assert run.arft_command(EXAMPLES / "finance_lookup", ["eval", "--limit", "2"])[1:] == ["eval", job, "--limit", "2"]
    assert run.arft_command(EXAMPLES / "finance_lookup", [])[1:] == ["train", job]
    assert run.arft_command(EXAMPLES / "finance_lookup", ["--out", "x"])[1:] == ["train", job, "--out", "x"]


def test_job_picks_another_job_file_of_the_example() -> None:
    run = runner()
    plain = str(EXAMPLES / "finance_lookup" / "job_plain.yaml")
    assert run.arft_command(EXAMPLES / "finance_lookup", ["eval", "--job", "job_plain.yaml", "--limit", "2"])[1:] == [
        "eval", plain, "--limit", "2"]
    assert run.arft_command(EXAMPLES / "finance_lookup", ["--job", "job_plain.yaml"])[1:] == ["train", plain]
    with pytest.raises(SystemExit, match="--job needs a file name"):
        run.arft_command(EXAMPLES / "finance_lookup", ["eval", "--job"])


def test_an_unknown_example_lists_the_ones_there_are() -> None:
    with pytest.raises(SystemExit, match="the examples are: .*finance_lookup"):
        runner().example_dir("nope")


def test_services_only_where_an_example_has_them() -> None:
    run = runner()
    with run.services(EXAMPLES / "code_qa") as nothing:
        assert nothing is None
    with run.services(EXAMPLES / "fast_function") as judge:
        answer = httpx.post(f"{judge}/chat/completions", json={"model": "judge", "messages": [
            {"role": "user", "content": "def f(x):\n    return x\n"}]})
        assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["role"] == "assistant"


def test_one_command_starts_the_tool_server_runs_arft_and_stops_it() -> None:
    """A real subprocess: finance_lookup's HTTP tool server around `arft doctor` (tools started)."""
    done = subprocess.run([sys.executable, str(EXAMPLES / "run.py"), "finance_lookup", "doctor",
                           "--no-rollouts", "--json"], capture_output=True, text=True, timeout=120)
    assert "finance_lookup: services on http://127.0.0.1:8765" in done.stderr
    report = json.loads(done.stdout)  # stdout stays pure JSON: the runner speaks on stderr
    tools = next(c for c in report["checks"] if c["id"] == "task.tools")
    assert tools["verdict"] == "pass" and "cat, list, search" in tools["measured"]
    with pytest.raises(httpx.TransportError):  # stopped with the command
        httpx.get("http://127.0.0.1:8765/health", timeout=1.0)

"""Start the finance_lookup tool server around a run (``bench/case_study.py`` and ``run.py`` use it).

``serve()`` runs ``server.py`` as its own process on 127.0.0.1 at the port the job's tools point
at (8765), waits until it answers, and stops it when the block ends. When a finance_lookup server
already answers there (you started ``python server.py`` yourself) it is used as is; when
something else holds the port, it fails and says so.
"""

from __future__ import annotations

import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import httpx

HERE = Path(__file__).resolve().parent
PORT = 8765
"""The port job.yaml's tool URLs name."""


def _probe(url: str) -> str:
    """'ours' when a finance_lookup server answers at ``url``, 'other' when something else does,
    'free' when nothing listens."""
    try:
        answer = httpx.get(f"{url}/health", timeout=1.0)
    except httpx.TransportError:
        return "free"
    try:
        return "ours" if answer.json().get("service") == "finance_lookup" else "other"
    except ValueError:
        return "other"


@contextmanager
def serve(port: int = PORT, timeout_s: float = 30.0) -> Iterator[str]:
    """The tool server on 127.0.0.1:``port`` for the block; yields its base URL."""
    url = f"http://127.0.0.1:{port}"
    state = _probe(url)
    if state == "ours":
        yield url
        return
    if state == "other":
        raise RuntimeError(f"port {port} is taken by another service; stop it, or start "
                           f"examples/finance_lookup/server.py on another port and edit job.yaml's tool URLs")
    proc = subprocess.Popen([sys.executable, str(HERE / "server.py"), "--port", str(port)])
    try:
        deadline = time.monotonic() + timeout_s
        while _probe(url) != "ours":
            if proc.poll() is not None:
                raise RuntimeError(f"the finance_lookup server exited with code {proc.returncode}; "
                                   f"run `python {HERE / 'server.py'} --port {port}` to see why")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the finance_lookup server did not answer on {url} within {timeout_s:g}s")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

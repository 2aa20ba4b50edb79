"""Start the parallel_lookup tool server around a run (``examples/run.py`` and the benches use it).

``serve()`` runs ``server.create_app()`` on 127.0.0.1 at the port the job's tool points at (8766)
in a background thread (``arft.serving.serve``, the mechanism every example's service shares) for
the duration of a ``with`` block. The server's sleeps are ``asyncio.sleep`` on its own event loop,
so they overlap and never hold up the run. A parallel_lookup server already answering there
(``python server.py`` started by hand) is used as is.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import httpx

from arft.pyfile import load_file

HERE = Path(__file__).resolve().parent
PORT = 8766
"""The port job.yaml's tool URL names."""


def running(url: str) -> bool:
    """Whether a parallel_lookup server already answers at ``url``."""
    try:
        health = httpx.get(f"{url}/health", timeout=1.0).json()
    except (httpx.TransportError, ValueError):
        return False
    return isinstance(health, dict) and health.get("service") == "parallel_lookup"


@contextmanager
def serve(port: int = PORT, delay_s: float | None = None) -> Iterator[str]:
    """The tool server on 127.0.0.1:``port`` for the block (``delay_s``: seconds per call, default
    the server's 0.3); yields its base URL."""
    from arft.serving import serve as serve_app

    url = f"http://127.0.0.1:{port}"
    if running(url):
        yield url
        return
    server = load_file(HERE / "server.py", "parallel_lookup_server")
    app = server.create_app(server.DEFAULT_DELAY_S if delay_s is None else delay_s)
    with serve_app(app, port, name="the parallel_lookup tool server") as started:
        yield started

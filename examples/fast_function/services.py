"""The fast_function example's service: the local hack judge, for ``bench/case_study.py``.

``serve()`` runs ``judge_server.app()`` on 127.0.0.1 (the job's ``base_url`` port by default) in
a background thread for the duration of a ``with`` block.
"""

from __future__ import annotations

import importlib.util
import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator


def _judge_module() -> Any:
    # Loaded by path: bench/case_study.py imports this file by path too (no package here).
    path = Path(__file__).resolve().with_name("judge_server.py")
    spec = importlib.util.spec_from_file_location("fast_function_judge_server", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (for a judge beside another run's)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve(port: int | None = None) -> Iterator[str]:
    """Serve the rule-based judge until the block ends; yields its ``.../v1`` base URL."""
    import uvicorn

    module = _judge_module()
    port = port or module.PORT
    server = uvicorn.Server(uvicorn.Config(module.app(), host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError(f"the fast_function judge did not start on 127.0.0.1:{port} "
                               "(port in use? another run's judge may still be up)")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=10)

"""Run an ASGI app (FastAPI) on 127.0.0.1 in a background thread: examples' tool servers and
judges, tests and benchmarks share this one mechanism."""

from __future__ import annotations

import errno
import socket
import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    from starlette.types import ASGIApp


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_problem(host: str, port: int, hint: str = "") -> str | None:
    """Why ``host:port`` cannot be listened on, or None: checked up front so a command can give
    a clear message rather than uvicorn's bind error after start-up (``hint``: who may hold it)."""
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                who = f" ({hint})" if hint else ""
                return f"port {port} on {host} is already in use{who}; pass a free one with --port"
            return f"cannot listen on {host}:{port} ({e}); pass another --host or --port"
    return None


@contextmanager
def serve(app: "ASGIApp", port: int | None = None, name: str = "server") -> Iterator[str]:
    """Serve ``app`` on 127.0.0.1 until the block ends; yields the base URL (no trailing slash).

    Raises ``RuntimeError`` naming ``name`` and the port when it does not start within 10 s
    (usually: the port is taken by another process).
    """
    import uvicorn

    port = port or free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError(f"{name} did not start on 127.0.0.1:{port} (port in use? stop the "
                               "process holding it, or pick another port)")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)

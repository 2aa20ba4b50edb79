"""Run an ASGI app (FastAPI) on 127.0.0.1: in a background thread (``serve``: examples' tool
servers and judges, tests and benchmarks) or as a task of the running event loop (``serve_here``:
arft's gateway, which calls the engine that loop drives)."""

from __future__ import annotations

import errno
import socket
import asyncio
import threading
import time
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, AsyncIterator, Iterator

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


@asynccontextmanager
async def serve_here(app: "ASGIApp", name: str = "server", host: str = "127.0.0.1") -> AsyncIterator[str]:
    """Serve ``app`` on a free port of ``host`` from the running event loop until the block ends;
    yields the base URL. The host process keeps its own signal handling (uvicorn's is off).

    Raises ``RuntimeError`` naming ``name`` when it does not start within 10 s.
    """
    import uvicorn

    class _Server(uvicorn.Server):
        @contextmanager
        def capture_signals(self) -> Iterator[None]:  # Ctrl-C belongs to the command, not to us
            yield

    with socket.socket() as sock:  # bound here, so the port is known before the server starts
        sock.bind((host, 0))
        port = int(sock.getsockname()[1])
        config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False)
        server = _Server(config)
        task = asyncio.ensure_future(server.serve(sockets=[sock]))
        deadline = time.monotonic() + 10
        while not server.started:
            if task.done() or time.monotonic() > deadline:
                why = "it stopped" if task.done() else "no answer in 10 s"
                raise RuntimeError(f"{name} did not start on {host}:{port} ({why}); see the log above")
            await asyncio.sleep(0.01)
        try:
            yield f"http://{host}:{port}"
        finally:
            server.should_exit = True
            await asyncio.wait_for(task, timeout=10)

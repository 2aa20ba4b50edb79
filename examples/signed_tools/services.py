"""Start the signed_tools server around a run (``examples/run.py signed_tools`` uses it).

``serve()`` runs ``server.create_app()`` on 127.0.0.1:8766 (the port job.yaml names) in a
background thread for the duration of a ``with`` block. The server and arft must share the
signing secret and the token: both read ``TOOL_SIGNING_SECRET`` and ``TOOL_TOKEN``; when one is
unset, ``serve()`` makes a random one for this process and the arft it starts (a demo only: a
real server keeps its own copy of the secret).
"""

from __future__ import annotations

import os
import secrets
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from arft.pyfile import load_file


def _server_module() -> Any:
    # Loaded by path: the examples are folders, not a package.
    return load_file(Path(__file__).resolve().with_name("server.py"), "signed_tools_server")


@contextmanager
def serve(port: int | None = None) -> Iterator[str]:
    """Serve the signed tool and grader endpoints until the block ends; yields the base URL."""
    from arft.serving import serve as serve_app

    module = _server_module()
    for name, size in (("TOOL_SIGNING_SECRET", 32), ("TOOL_TOKEN", 16)):
        os.environ.setdefault(name, secrets.token_hex(size))  # the arft subprocess inherits it
    app = module.create_app(os.environ["TOOL_SIGNING_SECRET"], os.environ["TOOL_TOKEN"])
    with serve_app(app, port or module.DEFAULT_PORT, name="the signed_tools server") as url:
        yield url

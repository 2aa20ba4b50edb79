"""The fast_function example's service: the local hack judge, for ``bench/case_study.py``.

``serve()`` runs ``judge_server.app()`` on 127.0.0.1 (the job's ``base_url`` port by default) in
a background thread for the duration of a ``with`` block.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from arft.pyfile import load_file
from arft.serving import free_port  # noqa: F401 - a free port for a judge beside another run's


def _judge_module() -> Any:
    # Loaded by path: bench/case_study.py imports this file by path too (no package here).
    return load_file(Path(__file__).resolve().with_name("judge_server.py"), "fast_function_judge_server")


@contextmanager
def serve(port: int | None = None) -> Iterator[str]:
    """Serve the rule-based judge until the block ends; yields its ``.../v1`` base URL."""
    from arft.serving import serve as serve_app

    module = _judge_module()
    with serve_app(module.app(), port or module.PORT, name="the fast_function judge") as url:
        yield f"{url}/v1"

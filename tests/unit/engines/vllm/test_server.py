"""Starting a vLLM server process, with a stand-in for vLLM's python (no vLLM needed): a port
taken before the server bound it costs a start on another port, not the run."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from arft.engines.base import EngineError
from arft.engines.vllm.server import PORT_TRIES, ServerOptions, VLLMServer

FAKE_VLLM = """#!{python}
# A stand-in for `python -m vllm.entrypoints.openai.api_server`: the first {taken} starts find
# their port taken (as vLLM says it), the next one answers /health on its port.
import http.server, sys
from pathlib import Path

starts = Path({starts!r})
starts.write_text(starts.read_text() + "x" if starts.exists() else "x")
if len(starts.read_text()) <= {taken}:
    print("OSError: [Errno 98] Address already in use", flush=True)
    sys.exit(1)


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


port = int(sys.argv[sys.argv.index("--port") + 1])
http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


def fake_vllm(tmp_path: Path, taken: int) -> str:
    path = tmp_path / "python"
    path.write_text(FAKE_VLLM.format(python=sys.executable, taken=taken, starts=str(tmp_path / "starts")))
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_a_port_taken_before_the_server_bound_it_starts_it_on_another(tmp_path: Path) -> None:
    said: list[str] = []
    server = VLLMServer.start(ServerOptions(model_dir="m"), fake_vllm(tmp_path, taken=1), tmp_path / "vllm.log",
                              timeout_s=30, on_status=said.append)
    try:
        assert (tmp_path / "starts").read_text() == "xx"
        assert any("was taken" in s for s in said) and said[-1].startswith("vLLM server up")
    finally:
        server.stop()
    assert server.process.poll() is not None


def test_a_port_taken_at_every_try_is_an_error_with_the_log(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="Address already in use"):
        VLLMServer.start(ServerOptions(model_dir="m"), fake_vllm(tmp_path, taken=PORT_TRIES), tmp_path / "vllm.log",
                         timeout_s=30)
    assert (tmp_path / "starts").read_text() == "x" * PORT_TRIES

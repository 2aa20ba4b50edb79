"""No escape probe gets out of the sandbox that shell tools, python graders and tests_pass run in.

Sandbox escape suite: small attacks run the way the shell tool, a python grader and
``tests_pass`` run untrusted code, each judged from outside (did the host see it?) and inside.

Run: ``python -m bench run sandbox_escapes [--only NAME,NAME] [--list]``. Prints one line per probe,
``blocked`` or ``ESCAPED`` (or ``BROKEN`` when a probe could not tell: that fails the suite too),
then ``escapes/probes`` and the isolation layers the host granted; exits 1 on any escape or
broken probe. Goal: 0 escapes / >= 30 probes in a few minutes on 2 cores.

The probes themselves (network, the trainer's files and environment, other processes, writes
outside the workspace, fork/memory/disk bombs, IPC across runs and grades, ptrace, mount, bpf,
keyctl and other denied syscalls, link tricks, timeouts, pytest collection tricks) live in
``bench/lib/sandbox_probes.py`` (shell tool) and ``bench/lib/sandbox_graders.py`` (python
grader, ``tests_pass``); this file holds the harness: the host-side bait (a secret
env var and files outside the workspace, TCP/UDP/Unix servers the sandbox must not reach) and
the three ways of running a probe.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import socket
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from arft.config import ShellToolSpec
from arft.graders.registry import build_grader
from arft.records import Score
from arft.sandbox import (CallLimits, CallResult, SandboxedFunction, WarmPool,
                          create_workspace, probe_isolation, remove_workspace)
from arft.tools.base import ToolContext
from arft.tools.shell import ShellTool
from bench.lib.harness import record
from bench.lib.sandbox_graders import GRADER_PROBES, TESTS_PASS_PROBES
from bench.lib.sandbox_probes import SHELL_PROBES, Probe, Verdict

QUICK = ["--only", "net_host_loopback_tcp,file_secret_world_readable,ptrace_a_process,keyctl,"
         "tests_conftest_forces_pass"]  # one probe per kind of layer; the whole suite is ~1 min

PROBES: list[Probe] = [*SHELL_PROBES, *GRADER_PROBES, *TESTS_PASS_PROBES]

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Servers:
    """Listeners on the host the sandbox must not reach; they record who got through."""

    tcp_port: int = 0
    udp_port: int = 0
    unix_path: str = ""
    abstract_name: bytes = b""
    seen: list[str] = field(default_factory=list)
    _socks: list[socket.socket] = field(default_factory=list)

    def start(self, folder: Path) -> None:
        tcp = socket.socket()
        tcp.bind(("127.0.0.1", 0))
        tcp.listen(16)
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp.bind(("127.0.0.1", 0))
        unix = socket.socket(socket.AF_UNIX)
        self.unix_path = str(folder / "host.sock")
        unix.bind(self.unix_path)
        os.chmod(self.unix_path, 0o777)
        unix.listen(16)
        abstract = socket.socket(socket.AF_UNIX)
        self.abstract_name = b"\0arft-escapes-" + secrets.token_hex(6).encode()
        abstract.bind(self.abstract_name)
        abstract.listen(16)
        self.tcp_port, self.udp_port = tcp.getsockname()[1], udp.getsockname()[1]
        self._socks = [tcp, udp, unix, abstract]
        for sock, name in zip(self._socks, ("tcp", "udp", "unix", "abstract")):
            threading.Thread(target=self._serve, args=(sock, name), daemon=True).start()

    def _serve(self, sock: socket.socket, name: str) -> None:
        while True:
            try:
                if sock.type == socket.SOCK_DGRAM:
                    sock.recvfrom(4096)
                else:
                    sock.accept()[0].close()
            except OSError:
                return
            self.seen.append(name)

    def close(self) -> None:
        for sock in self._socks:
            sock.close()


def run_folder() -> Path:
    """A fresh folder for the bench's bait and workspaces, where a trainer keeps its runs (in
    the repo's ``bench/out``, not in /tmp: the sandbox has a private /tmp anyway)."""
    out = REPO / "bench" / "out"
    out.mkdir(exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="sandbox_escapes-", dir=out))


class Bench:
    """The host side: scratch folders, bait, servers, and the three ways to run a probe."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.token = "arft-secret-" + secrets.token_hex(8)
        self.secret_private = root / "trainer" / "private.key"
        self.secret_world = root / "trainer" / "job.env"
        self.world_dir = Path(tempfile.mkdtemp(prefix="arft-escapes-", dir="/var/tmp"))
        self.host_tmp = Path(tempfile.mkdtemp(prefix="arft-escapes-"))
        self.servers = Servers()
        self.shell = ShellTool(ShellToolSpec(type="shell", timeout_s=10, memory_mb=512,
                                             max_output_chars=4000))
        self.workspaces = root / "workspaces"
        self.template = root / "template"
        self.pid = os.getpid()

    def plant(self) -> None:
        """The bait: a secret env var, secret files, world-writable folders, servers."""
        os.environ["ARFT_BENCH_SECRET"] = self.token
        self.root.chmod(0o755)  # as a run folder made by mkdir is: only the sandbox hides it
        self.secret_private.parent.mkdir(parents=True)
        self.secret_private.write_text(self.token)
        self.secret_private.chmod(0o600)
        self.secret_world.write_text(f"API_KEY={self.token}\n")
        self.secret_world.chmod(0o644)
        for folder in (self.world_dir, self.host_tmp):
            folder.chmod(0o777)
        self.servers.start(self.world_dir)
        self.template.mkdir()
        (self.template / "calc.py").write_text("def sub(a, b):\n    return a + b  # bug\n")

    def cleanup(self) -> None:
        os.environ.pop("ARFT_BENCH_SECRET", None)
        self.servers.close()
        for folder in (self.world_dir, self.host_tmp, self.root):
            shutil.rmtree(folder, ignore_errors=True)

    def workspace(self, template: bool = False) -> Path:
        return create_workspace(self.workspaces, self.template if template else None,
                                "trace_" + uuid.uuid4().hex)

    async def sh(self, command: str, ws: Path | None = None) -> str:
        """Run ``command`` exactly as the model's shell tool call would; its output."""
        ws = ws or self.workspace()
        ctx = ToolContext(trace_id=ws.name, call_id="call_" + uuid.uuid4().hex[:8], workspace=ws)
        outcome = await self.shell.call(json.dumps({"command": command}), ctx)
        if outcome.status == "infra_error":
            raise RuntimeError(f"the shell tool could not start: {outcome.output}")
        return outcome.output

    async def grader_calls(self, source: str, *args_list: tuple[Any, ...],
                           timeout_s: float = 10) -> list[CallResult]:
        """Calls of ``grade(*args)`` from ``source`` on one warm python-grader worker."""
        fn = SandboxedFunction(source, "<escape probe>", "grade",
                               CallLimits(timeout_s=timeout_s, memory_mb=512, disk_mb=64))
        async with WarmPool(fn, 1, scratch_root=self.host_tmp) as pool:
            return [await pool.call(*args) for args in args_list]

    async def tests_pass(self, ws: Path, tests: dict[str, str], fast: bool = True,
                         **spec: Any) -> Score:
        """Grade ``ws`` with ``tests_pass`` and the task's ``tests``. ``fast``: pytest plugins
        of this venv off (they only slow the start; the plugin probe needs them on)."""
        env = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"} if fast else {}
        grader = build_grader({"type": "builtin", "name": "tests_pass", "tests": tests,
                               "env": env, **spec}, self.root)
        try:
            return await grader.grade({"workspace": str(ws)}, {})
        finally:
            remove_workspace(ws)


async def run_probe(bench: Bench, probe: Probe) -> tuple[Verdict, float]:
    start = time.monotonic()
    try:
        verdict = await probe.run(bench)
    except Exception as e:  # noqa: BLE001 - a probe that crashed cannot vouch for anything
        verdict = Verdict(None, f"probe crashed: {type(e).__name__}: {e}")
    return verdict, time.monotonic() - start


async def run_suite(only: set[str] | None) -> dict[str, object]:
    chosen = [p for p in PROBES if only is None or p.name in only]
    bench = Bench(run_folder())
    bench.plant()
    escapes = broken = 0
    layers: tuple[str, ...] = ()
    t0 = time.monotonic()
    try:
        layers = await probe_isolation(bench.workspace())
        for probe in chosen:
            verdict, took = await run_probe(bench, probe)
            label = {True: "ESCAPED", False: "blocked", None: "BROKEN"}[verdict.escaped]
            escapes += verdict.escaped is True
            broken += verdict.escaped is None
            print(f"{label:8} {probe.name:32} {probe.via:10} {took:5.1f}s  {verdict.detail}",
                  flush=True)
    finally:
        bench.cleanup()
    print(f"\n{escapes}/{len(chosen)} escapes ({broken} broken) in {time.monotonic() - t0:.0f} s")
    print(f"isolation: {', '.join(layers)}")
    return {"escapes": escapes, "broken": broken, "probes": len(chosen), "isolation": list(layers),
            "seconds": round(time.monotonic() - t0, 1)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated probe names")
    parser.add_argument("--list", action="store_true", help="list the probes and exit")
    args = parser.parse_args(argv)
    if args.list:
        for p in PROBES:
            print(f"{p.name:32} {p.via:10} {p.what}")
        return 0
    only = set(args.only.split(",")) if args.only else None
    result = asyncio.run(run_suite(only))
    if only is None:  # only the whole suite is a figure worth keeping
        record("sandbox_escapes", result)
    return 1 if result["escapes"] or result["broken"] else 0


if __name__ == "__main__":
    sys.exit(main())

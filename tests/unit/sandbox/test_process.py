"""run_sandboxed against real processes: network, filesystem, time, memory, output, environment.

Each isolation test first checks that the host granted the layer it relies on (hosts that
forbid namespaces skip those tests with the reason) and, where it can, runs a control that
shows the same probe succeeds without the sandbox, so a pass proves the sandbox did it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from arft.sandbox import SandboxError, SandboxLimits, run_sandboxed

from .helpers import need

REPO = Path(__file__).resolve().parents[3]
BASH = shutil.which("bash") or "/bin/bash"
FAST = SandboxLimits(timeout_s=20)


def sh(command: str) -> list[str]:
    return [BASH, "-c", command]


def python_argv(code: str) -> tuple[list[str], list[Path]]:
    """Run this test's own interpreter in the sandbox (its install may sit under /root)."""
    return [os.path.realpath(sys.executable), "-S", "-c", code], [Path(sys.base_prefix)]


async def test_runs_in_workspace_with_clean_env(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "s3cret-" + uuid.uuid4().hex
    monkeypatch.setenv("ARFT_TEST_SECRET", secret)
    result = await run_sandboxed(sh("env; pwd; echo made > out.txt"), ws, FAST,
                                 env={"GIVEN": "yes"})
    assert result.exit_code == 0, result
    assert secret not in result.stdout
    assert "ARFT_TEST_SECRET" not in result.stdout
    lines = result.stdout.splitlines()
    assert f"HOME={ws}" in lines and "GIVEN=yes" in lines
    assert lines[-1] == str(ws)
    assert (ws / "out.txt").read_text() == "made\n"
    assert result.timed_out is False and result.killed_reason is None and result.error is None


async def test_exit_code_stdout_stderr_and_stdin(ws: Path) -> None:
    result = await run_sandboxed(sh("cat; echo err >&2; exit 3"), ws, FAST, stdin="from stdin\n")
    assert (result.exit_code, result.stdout, result.stderr) == (3, "from stdin\n", "err\n")
    merged = await run_sandboxed(sh("echo a; echo b >&2; echo c"), ws, FAST, merge_stderr=True)
    assert merged.stdout == "a\nb\nc\n" and merged.stderr == ""


async def test_no_network_to_a_server_on_host_loopback(ws: Path, layers: tuple[str, ...]) -> None:
    need(layers, "netns")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        server.settimeout(0.5)
        port = server.getsockname()[1]
        probe = sh(f"echo hello > /dev/tcp/127.0.0.1/{port} && echo CONNECTED")
        # Control: the same probe reaches the server when network is allowed.
        allowed = await run_sandboxed(probe, ws, SandboxLimits(timeout_s=20, network=True))
        assert "CONNECTED" in allowed.stdout, allowed
        server.accept()[0].close()
        blocked = await run_sandboxed(probe, ws, FAST)
        assert "CONNECTED" not in blocked.stdout
        assert blocked.exit_code != 0
        with pytest.raises(TimeoutError):
            server.accept()  # nothing came in


async def test_outside_host_name_does_not_resolve(ws: Path, layers: tuple[str, ...]) -> None:
    need(layers, "netns")
    result = await run_sandboxed(sh("getent hosts example.com || echo UNRESOLVED"), ws, FAST)
    assert "UNRESOLVED" in result.stdout, result


async def test_no_writes_outside_the_workspace(ws: Path, layers: tuple[str, ...]) -> None:
    need(layers, "readonly_fs", "private_tmp")
    # World-writable folders: only the sandbox, not file permissions, can stop these writes.
    shared = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="arft-test-"))
    in_tmp = Path(tempfile.mkdtemp(prefix="arft-test-"))
    try:
        for d in (shared, in_tmp):
            d.chmod(0o777)
        probe = REPO / f"sandbox-probe-{uuid.uuid4().hex}"
        # hidden=(): host folders stay visible (not hidden by default), to show they are read-only.
        result = await run_sandboxed(sh(
            f"echo x > {shared}/f; echo x > {in_tmp}/f; echo x > {probe}; echo x > ok"), ws, FAST,
            hidden=())
        assert not (shared / "f").exists()
        assert not (in_tmp / "f").exists()
        assert not probe.exists()
        assert "Read-only file system" in result.stderr
        assert (ws / "ok").read_text() == "x\n"  # the workspace itself stays writable
    finally:
        shutil.rmtree(shared)
        shutil.rmtree(in_tmp)


async def test_private_tmp_is_writable_and_empty(ws: Path, layers: tuple[str, ...]) -> None:
    need(layers, "private_tmp")
    marker = Path(tempfile.mkdtemp(prefix="arft-visible-"))
    try:
        result = await run_sandboxed(sh(f"ls -a /tmp; echo t > $TMPDIR/t && cat $TMPDIR/t"),
                                     ws, FAST)
        assert marker.name not in result.stdout  # the host's /tmp is not visible
        assert result.stdout.endswith("t\n") and result.exit_code == 0
    finally:
        marker.rmdir()


async def test_killed_at_its_time_limit(ws: Path) -> None:
    result = await run_sandboxed(sh("echo started; sleep 60"), ws, SandboxLimits(timeout_s=1))
    assert result.timed_out and result.killed_reason == "timeout"
    assert result.duration_s < 10
    assert result.stdout == "started\n"  # what it printed before the kill is kept


async def test_nothing_outlives_the_call(ws: Path, layers: tuple[str, ...]) -> None:
    tag = f"6{uuid.uuid4().int % 10**6}.5"  # a unique sleep argument to find on the host
    # Only a pid namespace catches a process that left the process group with setsid.
    escape = f"setsid sleep {tag} & " if "pidns" in layers else ""
    result = await run_sandboxed(sh(f"{escape}sleep {tag} & echo started"), ws, FAST)
    assert result.stdout == "started\n"
    for _ in range(40):
        if not _processes_with_arg(tag):
            break
        await asyncio.sleep(0.05)
    assert not _processes_with_arg(tag)


async def test_cancelling_the_call_kills_the_command(ws: Path) -> None:
    tag = f"7{uuid.uuid4().int % 10**6}.5"
    task = asyncio.create_task(run_sandboxed(sh(f"sleep {tag}"), ws, FAST))
    for _ in range(100):
        await asyncio.sleep(0.05)
        if _processes_with_arg(tag):
            break
    assert _processes_with_arg(tag), "the command never started"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(40):
        if not _processes_with_arg(tag):
            break
        await asyncio.sleep(0.05)
    assert not _processes_with_arg(tag)


def _processes_with_arg(arg: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if arg.encode() in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"):
                found.append(int(pid))
        except OSError:
            continue
    return found


async def test_memory_limit_stops_a_2gb_allocation(ws: Path, layers: tuple[str, ...]) -> None:
    if os.geteuid() == 0:
        need(layers, "mountns")  # to expose this interpreter to the sandbox uid
    argv, readable = python_argv("b = bytearray(2 * 1024**3); print('ALLOCATED')")
    result = await run_sandboxed(argv, ws, SandboxLimits(timeout_s=20, memory_mb=256),
                                 readable=readable)
    if result.exit_code == 127:
        pytest.skip(f"this interpreter cannot be run by the sandbox uid here: {result.error}")
    assert "ALLOCATED" not in result.stdout
    assert result.exit_code != 0 and "MemoryError" in result.stderr, result


async def test_cpu_limit(ws: Path) -> None:
    result = await run_sandboxed(sh("while :; do :; done"), ws,
                                 SandboxLimits(timeout_s=20, cpu_s=1))
    assert result.killed_reason == "cpu_limit" and not result.timed_out


async def test_file_size_limit(ws: Path) -> None:
    result = await run_sandboxed(["dd", "if=/dev/zero", "of=big", "bs=1M", "count=5"], ws,
                                 SandboxLimits(timeout_s=20, max_file_mb=1))
    assert result.killed_reason == "file_size_limit"
    assert (ws / "big").stat().st_size <= 1 << 20


async def test_output_of_100mb_is_truncated(ws: Path) -> None:
    result = await run_sandboxed(sh("head -c 100000000 /dev/zero | tr '\\0' a; echo END"), ws,
                                 SandboxLimits(timeout_s=20, max_output_chars=1000))
    assert result.exit_code == 0 and result.truncated
    assert len(result.stdout) < 1200
    assert result.stdout.startswith("a" * 500)
    assert result.stdout.endswith("aEND\n")  # the tail is kept: errors usually come last
    assert "100000004 bytes" in result.stdout


async def test_other_processes_are_invisible(ws: Path, layers: tuple[str, ...]) -> None:
    need(layers, "pidns", "private_proc")
    result = await run_sandboxed(sh("ls /proc | grep -c '^[0-9]'"), ws, FAST)
    assert int(result.stdout) < 5  # bash, ls, grep: not the host's processes


async def test_runs_unprivileged(ws: Path, layers: tuple[str, ...]) -> None:
    need(layers, "unprivileged_uid", "no_new_privs")
    result = await run_sandboxed(sh("id -u; grep CapEff /proc/self/status"), ws, FAST)
    uid, caps = result.stdout.splitlines()
    assert uid != "0" or "userns" in layers
    assert caps.split()[1] == "0000000000000000"


async def test_required_isolation_refuses_to_run(ws: Path) -> None:
    result = await run_sandboxed(sh("echo ran > ran"), ws,
                                 SandboxLimits(required_isolation=("no_such_layer",)))
    assert result.error is not None and "no_such_layer" in result.error
    assert not (ws / "ran").exists()


async def test_missing_program_and_bad_arguments(ws: Path, tmp_path: Path) -> None:
    result = await run_sandboxed(["no-such-program-arft"], ws, FAST)
    assert result.exit_code == 127 and "cannot run" in (result.error or "")
    with pytest.raises(SandboxError, match="create_workspace"):
        await run_sandboxed(["true"], tmp_path / "missing", FAST)
    with pytest.raises(SandboxError, match="argv is empty"):
        await run_sandboxed([], ws, FAST)
    with pytest.raises(ValueError, match="timeout_s"):
        SandboxLimits(timeout_s=0)

"""The warm fork-server pool and the fresh-process mode, against real sandboxed processes.

Isolation per call is what matters: a call must not see the globals, files or processes of an
earlier call; a zygote that dies or hangs is replaced; closing the pool leaves no process.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from arft.sandbox import CallLimits, CallResult, SandboxedFunction, WarmPool, run_fresh
from arft.sandbox.zygote import Zygote, ZygoteStartFailed

SOURCE = '''
import os, subprocess, sys, time

ZYGOTE = os.urandom(8).hex()  # run once per zygote: shared by every call it serves
SEEN = []

def grade(case, arg=None):
    SEEN.append(case)
    if case == "echo":
        return {"zygote": ZYGOTE, "arg": arg, "seen": len(SEEN)}
    if case == "sleep":
        time.sleep(arg)
        return arg
    if case == "litter":
        for folder in (".", "/tmp", "/dev/shm"):
            with open(os.path.join(folder, "litter"), "w") as f:
                f.write("x")
        subprocess.Popen(["sleep", "1000"], start_new_session=True)
        os.environ["LITTER"] = "1"
        return "littered"
    if case == "look":
        return {"files": sorted(os.listdir(".")) + sorted(os.listdir("/dev/shm")),
                "tmp_litter": os.path.exists("/tmp/litter"), "env": "LITTER" in os.environ,
                "processes": len([p for p in os.listdir("/proc") if p.isdigit()]),
                "cwd": os.getcwd(), "home": os.environ["HOME"], "seen": len(SEEN)}
    if case == "kill_zygote":
        os.kill(os.getppid(), 9)
        time.sleep(5)
    if case == "noisy":
        print("x" * 200_000)
        os.write(1, b"\\x00\\x00\\x00\\x05junk")
        os.write(2, b"to stderr\\n" * 10_000)
        return "quiet answer"
    if case == "raise":
        raise RuntimeError("boom")
    if case == "object":
        return object()
'''


def make(source: str = SOURCE, timeout_s: float = 5) -> SandboxedFunction:
    return SandboxedFunction(source, "<test>", "grade", CallLimits(timeout_s=timeout_s,
                                                                   memory_mb=512, disk_mb=8))


def sandbox_processes(tag: str) -> list[int]:
    """Host pids whose command line mentions ``tag`` (the launcher's config names the scratch)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if tag.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            continue
    return found


def all_gone(tag: str) -> bool:
    """Whether the sandbox processes mentioning ``tag`` are gone (killed ones take a moment)."""
    for _ in range(100):
        if not sandbox_processes(tag):
            return True
        time.sleep(0.05)
    return False


async def test_concurrent_calls_use_every_zygote_and_keep_them_warm(tmp_path: Path) -> None:
    async with WarmPool(make(), 2, scratch_root=tmp_path) as pool:
        results = await asyncio.gather(*(pool.call("echo", i) for i in range(20)))
    assert all(r.ok for r in results), results
    assert [r.value["arg"] for r in results] == list(range(20))
    zygotes = {r.value["zygote"] for r in results}
    assert len(zygotes) == 2  # both served, and each ran the module only once
    assert {r.value["seen"] for r in results} == {1}  # every call starts from a pristine copy


async def test_nothing_of_a_call_survives_into_the_next(tmp_path: Path) -> None:
    async with WarmPool(make(), 1, scratch_root=tmp_path) as pool:
        first = await pool.call("look")
        assert (await pool.call("litter")).value == "littered"
        after = await pool.call("look")
    assert first.ok and after.ok, (first, after)
    assert after.value == first.value  # same files, processes, env and globals as before
    assert after.value["files"] == [] and not after.value["tmp_litter"]
    assert after.value["processes"] <= 3 and after.value["cwd"] == after.value["home"]


async def test_a_killed_zygote_fails_its_call_and_is_replaced(tmp_path: Path) -> None:
    async with WarmPool(make(), 1, scratch_root=tmp_path) as pool:
        before = (await pool.call("echo")).value["zygote"]
        dead = await pool.call("kill_zygote")
        assert dead.kind == "crashed" and "died during the call" in (dead.error or "")
        again = await pool.call("echo")
    assert again.ok and again.value["zygote"] != before


async def test_timeout_then_the_pool_keeps_working(tmp_path: Path) -> None:
    async with WarmPool(make(timeout_s=1), 1, scratch_root=tmp_path) as pool:
        slow = await pool.call("sleep", 30)
        fast = await pool.call("sleep", 0)
    assert slow.kind == "timeout" and "timed out after 1 s" in (slow.error or "")
    assert fast == CallResult("ok", value=0)


async def test_output_of_the_users_code_cannot_corrupt_answers(tmp_path: Path) -> None:
    async with WarmPool(make(), 1, scratch_root=tmp_path) as pool:
        noisy = [await pool.call("noisy") for _ in range(3)]
    fresh = await run_fresh(make(), "noisy", scratch_root=tmp_path)
    assert {r.value for r in [*noisy, fresh]} == {"quiet answer"}, (noisy, fresh)


async def test_errors_of_the_users_code(tmp_path: Path) -> None:
    async with WarmPool(make(), 1, scratch_root=tmp_path) as pool:
        raised = await pool.call("raise")
        bad = await pool.call("object")
        not_json = await pool.call({1, 2})
    assert raised.kind == "exception" and raised.error.startswith("RuntimeError: boom")
    assert 'raise RuntimeError("boom")' in raised.error  # the user's line, in the traceback
    assert bad.kind == "bad_value" and "not JSON" in (bad.error or "")
    assert not_json.kind == "bad_input" and "not JSON" in (not_json.error or "")


async def test_a_module_that_fails_to_load_fails_every_call(tmp_path: Path) -> None:
    source = "import json\nCONFIG = json.loads('{broken')\ndef grade(x):\n    return 1\n"
    async with WarmPool(make(source), 1, scratch_root=tmp_path) as pool:
        results = [await pool.call(1) for _ in range(2)]
    for r in results:
        assert r.kind == "exception" and "loading the source failed" in (r.error or "")
        assert "JSONDecodeError" in (r.error or "") and "CONFIG = json.loads" in (r.error or "")


async def test_cancelled_call_kills_its_zygote(tmp_path: Path) -> None:
    async with WarmPool(make(), 1, scratch_root=tmp_path) as pool:
        task = asyncio.create_task(pool.call("sleep", 60))
        for _ in range(200):
            await asyncio.sleep(0.05)
            if sandbox_processes(str(tmp_path)):
                break
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert all_gone(str(tmp_path))
        assert (await pool.call("sleep", 0)).ok


async def test_close_leaves_no_process(tmp_path: Path) -> None:
    pool = WarmPool(make(), 2, scratch_root=tmp_path)
    await asyncio.gather(pool.call("sleep", 0.2), pool.call("sleep", 0.2))
    assert len(sandbox_processes(str(tmp_path))) >= 2
    await pool.aclose()
    assert all_gone(str(tmp_path))
    assert list(tmp_path.iterdir()) == []  # scratch folders removed
    with pytest.raises(RuntimeError, match="closed"):
        await pool.call("echo")


def test_pool_follows_a_new_event_loop(tmp_path: Path) -> None:
    pool = WarmPool(make(), 1, scratch_root=tmp_path)
    first = asyncio.run(pool.call("echo", "a"))
    second = asyncio.run(pool.call("echo", "b"))
    asyncio.run(pool.aclose())
    assert (first.value["arg"], second.value["arg"]) == ("a", "b")
    assert all_gone(str(tmp_path))


async def test_falls_back_to_a_fresh_process_when_a_zygote_cannot_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def broken_start(self: object) -> None:
        raise ZygoteStartFailed(CallResult("infra", error="no zygote here"))

    monkeypatch.setattr(Zygote, "start", broken_start)
    async with WarmPool(make(), 1, scratch_root=tmp_path) as pool:
        result = await pool.call("echo", 7)
    assert result.ok and result.value["arg"] == 7
    async with WarmPool(make(), 1, scratch_root=tmp_path, fallback_fresh=False) as pool:
        assert (await pool.call("echo")).error == "no zygote here"


async def test_fresh_mode(tmp_path: Path) -> None:
    fn = make(timeout_s=2)
    ok, raised, slow = await asyncio.gather(run_fresh(fn, "echo", 1, scratch_root=tmp_path),
                                            run_fresh(fn, "raise", scratch_root=tmp_path),
                                            run_fresh(fn, "sleep", 30, scratch_root=tmp_path))
    assert ok.ok and ok.value["arg"] == 1 and ok.value["seen"] == 1
    assert raised.kind == "exception" and "RuntimeError: boom" in (raised.error or "")
    assert slow.kind == "timeout"
    assert list(tmp_path.iterdir()) == []

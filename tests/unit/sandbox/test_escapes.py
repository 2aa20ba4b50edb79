"""A fast subset of the escape suite (``bench/sandbox_escapes.py``): the same probes, run the
same way, each one a different kind of attack. The whole suite takes about a minute; run it
with ``python -m bench run sandbox_escapes``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench.sandbox_escapes import PROBES, Bench, run_folder, run_probe

from .helpers import need

# probe -> the isolation layers it relies on (the test skips on hosts that refuse them)
FAST = {
    "net_host_loopback_tcp": ("netns",),
    "file_secret_world_readable": ("hidden_paths",),
    "ptrace_a_process": ("seccomp",),
    "unshare_user_and_mount": ("seccomp",),
    "keyctl": ("seccomp",),
    "ipc_sysv_across_runs": ("ipcns",),
    "grader_ipc_sysv_across_grades": ("ipcns",),
    "tests_conftest_forces_pass": (),
}


@pytest.fixture(scope="module")
def bench() -> Iterator[Bench]:
    planted = Bench(run_folder())
    planted.plant()
    try:
        yield planted
    finally:
        planted.cleanup()


def test_the_suite_has_at_least_30_probes_with_unique_names() -> None:
    names = [p.name for p in PROBES]
    assert len(names) >= 30 and len(set(names)) == len(names)
    assert set(FAST) <= set(names)


@pytest.mark.parametrize("name", sorted(FAST))
async def test_probe_is_blocked(bench: Bench, layers: tuple[str, ...], name: str) -> None:
    need(layers, *FAST[name])
    probe = next(p for p in PROBES if p.name == name)
    verdict, _ = await run_probe(bench, probe)
    assert verdict.escaped is False, f"{name}: {verdict.detail}"

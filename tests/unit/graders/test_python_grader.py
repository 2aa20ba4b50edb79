"""The python grader: build-time checks, score conversion, and sandbox escapes that must fail.

Grades run in real sandboxes (a warm pool of fork servers unless a test says otherwise). Each
escape test first checks that the host granted the isolation layer it relies on and skips with
the reason where it did not; the expectations are real effects (no connection reached the
server, no file appeared on the host, no process survived), not only the error text.
"""

from __future__ import annotations

import socket
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
import pytest_asyncio

from arft.graders.base import GraderError
from arft.graders.python_grader import PythonGrader, build
from arft.graders.registry import build_grader, grade_rollout
from tests.unit.graders.helpers import make_rollout

shared_loop = pytest.mark.asyncio(loop_scope="module")  # the tests that use `grader`

REPO = Path(__file__).resolve().parents[3]

CASES = '''
import json, math, os, socket, subprocess, sys
import numpy as np

CALLS = {"n": 0}

def grade(sample, item):
    case = item["case"]
    CALLS["n"] += 1
    if case == "exact":
        return 1.0 if sample["output_text"] == item["answer"] else 0.0
    if case == "bool":
        return sample["output_text"] == item["answer"]
    if case == "int":
        return 1
    if case == "dict":
        return {"score": 0.5, "sub_scores": {"format": 1, "content": 0.25}, "flags": ["short"],
                "passed": False}
    if case == "numpy":
        return np.float32(0.25)
    if case == "numpy_bool":
        return {"score": np.bool_(True), "sub_scores": {"n": np.int64(3)}}
    if case == "raise":
        helper(sample["output_text"])
    if case == "nan":
        return float("nan")
    if case == "inf":
        return {"score": 1.0, "sub_scores": {"x": float("inf")}}
    if case == "text":
        return "1.0"
    if case == "no_score":
        return {"sub_scores": {"a": 1.0}}
    if case == "calls":
        return float(CALLS["n"])
    if case == "loop":
        while True:
            pass
    if case == "memory":
        hog = []
        while True:
            hog.append(bytearray(16 << 20))
    if case == "big_file":
        with open("big", "wb") as f:
            f.write(b"x" * (8 << 20))
        return 1.0
    if case == "write":
        with open(item["path"], "w") as f:
            f.write("escaped")
        return 1.0
    if case == "read":
        with open(item["path"]) as f:
            return 1.0 if f.read() else 0.5
    if case == "connect":
        socket.create_connection(("127.0.0.1", item["port"]), timeout=3).close()
        return 1.0
    if case == "env":
        return 1.0 if os.environ[item["key"]] else 0.5
    if case == "leftovers":
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
        return {"score": 1.0, "sub_scores": {"processes": len(pids)}}
    if case == "fork_bomb":
        while True:
            try:
                os.fork()
            except OSError:
                pass
    raise KeyError(case)


def helper(text):
    raise ValueError("unparseable answer: " + text)
'''


def spec(source: str = CASES, **fields: Any) -> dict[str, Any]:
    return {"type": "python", "name": "cases", "source": source, **fields}


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def grader() -> AsyncIterator[PythonGrader]:
    """One warm pool for most tests: short limits so the bombs end fast."""
    g = build(spec(timeout_s=3, memory_mb=256, disk_mb=4), Path("."), pool_size=2,
              max_processes=64)
    yield g
    await g.aclose()


async def run(g: PythonGrader, case: str, output_text: str = "", **item: Any):
    return await g.grade({"output_text": output_text}, {"case": case, **item})


def need(g: PythonGrader, *layers: str) -> None:
    missing = [name for name in layers if name not in g.isolation]
    if missing:
        pytest.skip(f"this host does not allow {missing} (applied: {g.isolation})")


# -- build time --------------------------------------------------------------------------------


@pytest.mark.parametrize(("source", "message"), [
    ("def grade(sample, item):\n    return 1.0 +\n", "syntax error on line 2"),
    ("def grade(sample, item):\n    pass\nreturn 3\n", "syntax error on line 3"),
    ("def score(sample, item):\n    return 1.0\n", "no top-level `def grade(sample, item)`"),
    ("class A:\n    def grade(self, sample, item):\n        return 1\n", "no top-level"),
    ("async def grade(sample, item):\n    return 1.0\n", "`async def`"),
    ("def grade(sample):\n    return 1.0\n", "takes (sample)"),
    ("def grade(a, b, c):\n    return 1.0\n", "takes (a, b, c)"),
])
def test_bad_sources_fail_at_build(source: str, message: str) -> None:
    with pytest.raises(GraderError, match="'cases'") as err:
        build(spec(source), Path("."))
    assert message in str(err.value)


def test_spec_errors_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(GraderError, match="exactly one of 'source'"):
        build({"type": "python", "name": "g"}, tmp_path)
    with pytest.raises(GraderError, match="timeout_s"):
        build(spec(timeout_s=0), tmp_path)
    with pytest.raises(GraderError, match="did you mean 'source'"):
        build({"type": "python", "name": "g", "sorce": "x"}, tmp_path)
    with pytest.raises(GraderError, match="cannot read source_file .*missing.py"):
        build({"type": "python", "name": "g", "source_file": "missing.py"}, tmp_path)


def test_accepted_signatures_and_hosted_fields() -> None:
    for source in ("def grade(sample, item, extra=1):\n    return 1.0\n",
                   "def grade(*args):\n    return 1.0\n"):
        g = build(spec(source, image_tag="2025-05-08"), Path("."))
        assert g.name == "cases" and g.function.limits.timeout_s == 120
        assert (g.function.limits.memory_mb, g.function.limits.disk_mb) == (2048, 1024)


# -- scores ------------------------------------------------------------------------------------


@shared_loop
async def test_numbers_bools_and_dicts(grader: PythonGrader) -> None:
    assert (await run(grader, "exact", "Paris", answer="Paris")).score == 1.0
    miss = await run(grader, "exact", "Lyon", answer="Paris")
    assert miss.score == 0.0 and miss.error is None
    assert (await run(grader, "bool", "a", answer="a")).score == 1.0
    assert (await run(grader, "bool", "a", answer="b")).score == 0.0
    assert (await run(grader, "int")).score == 1.0
    assert (await run(grader, "numpy")).score == 0.25
    nb = await run(grader, "numpy_bool")
    assert (nb.score, nb.sub_scores, nb.error) == (1.0, {"n": 3.0}, None)
    d = await run(grader, "dict")
    assert (d.score, d.sub_scores, d.flags, d.passed, d.error) == (
        0.5, {"format": 1.0, "content": 0.25}, ("short",), False, None)
    assert d.grader == "cases"


@shared_loop
async def test_exception_keeps_the_reason_and_traceback(grader: PythonGrader) -> None:
    s = await run(grader, "raise", "forty-two")
    assert s.score == 0.0
    assert s.error.startswith("cases: grade raised ValueError: unparseable answer: forty-two")
    # The traceback's last lines, with the user's own source lines.
    assert "in helper" in s.error and 'raise ValueError("unparseable answer: " + text)' in s.error


@pytest.mark.parametrize(("case", "reason"), [
    ("nan", "grade's result is nan, not a finite number"),
    ("inf", "sub_score 'x' is inf"),
    ("text", "grade's result is '1.0' (str), not a number"),
    ("no_score", "without a 'score'"),
])
@shared_loop
async def test_invalid_results_are_errors(grader: PythonGrader, case: str, reason: str) -> None:
    s = await run(grader, case)
    assert s.score == 0.0 and reason in (s.error or ""), s


async def test_through_the_registry_with_a_real_rollout(tmp_path: Path) -> None:
    (tmp_path / "g.py").write_text(
        "def grade(sample, item):\n"
        "    calls = sample['trajectory']['n_tool_calls']\n"
        "    right = item['answer'] in sample['output_text']\n"
        "    return {'score': float(right) - 0.1 * calls, 'sub_scores': {'calls': calls}}\n")
    g = build_grader({"type": "python", "name": "file", "source_file": "g.py"}, tmp_path)
    try:
        score = await grade_rollout(g, make_rollout())
    finally:
        await g.aclose()
    assert score.error is None and score.score == pytest.approx(0.7)
    assert score.sub_scores == {"calls": 3.0} and score.grader == "file"


@shared_loop
async def test_state_does_not_leak_between_grades(grader: PythonGrader) -> None:
    # CALLS is bumped on every grade; each grade starts from the zygote's pristine copy.
    scores = [await run(grader, "calls") for _ in range(5)]
    assert [s.score for s in scores] == [1.0] * 5


async def test_fresh_mode_gives_the_same_scores() -> None:
    g = build(spec(timeout_s=20), Path("."), mode="fresh")
    assert (await run(g, "exact", "x", answer="x")).score == 1.0
    assert "ValueError" in ((await run(g, "raise", "y")).error or "")
    assert "not a finite number" in ((await run(g, "nan")).error or "")


async def test_hosted_libraries_and_arft_are_importable() -> None:
    names = ["numpy", "scipy", "sympy", "pandas", "rapidfuzz", "sklearn", "rouge_score",
             "deepdiff", "jsonschema", "pydantic", "yaml", "nltk", "sqlparse",
             "arft.graders.base"]
    source = ("import importlib\n"
              "def grade(sample, item):\n"
              "    for name in item['names']:\n"
              "        importlib.import_module(name)\n"
              "    if item['wordnet']:\n"
              "        import nltk\n"
              "        nltk.data.find('corpora/wordnet')\n"
              "    import numpy, scipy.special, rapidfuzz.fuzz\n"
              "    return float(numpy.isclose(scipy.special.expit(0.0), 0.5)"
              " and rapidfuzz.fuzz.ratio('ab', 'ab') == 100)\n")
    g = build(spec(source), Path("."), pool_size=1)
    try:
        # nltk's data installed in this environment is found inside too.
        wordnet = (Path(sys.prefix) / "nltk_data" / "corpora" / "wordnet").is_dir()
        s = await g.grade({}, {"names": names, "wordnet": wordnet})
    finally:
        await g.aclose()
    assert s.error is None and s.score == 1.0, s.error


# -- escapes: each fails safely and scores 0 with a reason -------------------------------------


@shared_loop
async def test_no_network_to_a_server_on_host_loopback(grader: PythonGrader) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        server.settimeout(0.5)
        s = await run(grader, "connect", port=server.getsockname()[1])
        need(grader, "netns")
        assert s.score == 0.0 and "OSError" in (s.error or ""), s
        with pytest.raises(TimeoutError):
            server.accept()  # nothing came in


@pytest.mark.parametrize("where", ["repo", "host_tmp", "var_tmp"])
@shared_loop
async def test_no_writes_outside_the_scratch_dir(grader: PythonGrader, where: str) -> None:
    folder = {"repo": REPO, "host_tmp": Path(tempfile.mkdtemp(prefix="arft-test-")),
              "var_tmp": Path(tempfile.mkdtemp(prefix="arft-test-", dir="/var/tmp"))}[where]
    if where != "repo":
        folder.chmod(0o777)  # world-writable: only the sandbox can stop the write
    target = folder / f"escape-{uuid.uuid4().hex}"
    try:
        s = await run(grader, "write", path=str(target))
        need(grader, "readonly_fs", "private_tmp")
        assert not target.exists()
        # Which refusal depends on where the folder is (a repo checked out under /tmp sits in
        # the sandbox's private /tmp, behind root-owned mount points): any refusal will do.
        refusals = ("Read-only file system", "No such file or directory", "Permission denied")
        assert s.score == 0.0 and any(r in (s.error or "") for r in refusals), s
    finally:
        target.unlink(missing_ok=True)
        if where != "repo":
            folder.rmdir()


@shared_loop
async def test_scratch_dir_is_writable_but_bounded(grader: PythonGrader) -> None:
    s = await run(grader, "big_file")  # 8 MB into a 4 MB scratch with 4 MB files
    assert s.score == 0.0
    assert "file size limit" in (s.error or "") or "No space left" in (s.error or ""), s


@shared_loop
async def test_trainer_files_are_not_readable(grader: PythonGrader, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"  # the test's tmp_path, world-readable
    secret.write_text("s3cret")
    secret.chmod(0o644)
    in_repo = REPO / f".arft-test-secret-{uuid.uuid4().hex}"
    in_repo.write_text("s3cret")
    in_repo.chmod(0o644)
    try:
        for path in (secret, in_repo, REPO / "pyproject.toml"):
            s = await run(grader, "read", path=str(path))
            need(grader, "private_tmp", "hidden_paths")
            assert s.score == 0.0 and "No such file or directory" in (s.error or ""), (path, s)
    finally:
        in_repo.unlink()
    # System files stay readable: hidden is the trainer's, not the OS's.
    assert (await run(grader, "read", path="/etc/hostname")).score in (0.5, 1.0)


async def test_parent_environment_is_invisible(monkeypatch: pytest.MonkeyPatch) -> None:
    key = f"ARFT_TEST_SECRET_{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv(key, "s3cret")
    g = build(spec(timeout_s=20), Path("."), pool_size=1)  # started after setenv
    try:
        s = await run(g, "env", key=key)
    finally:
        await g.aclose()
    assert s.score == 0.0 and f"KeyError: '{key}'" in (s.error or ""), s


@shared_loop
async def test_infinite_loop_times_out_and_the_pool_keeps_working(grader: PythonGrader) -> None:
    s = await run(grader, "loop")
    assert s.score == 0.0 and "timed out after 3 s" in (s.error or ""), s
    assert (await run(grader, "exact", "a", answer="a")).score == 1.0


@shared_loop
async def test_memory_bomb_is_stopped(grader: PythonGrader) -> None:
    s = await run(grader, "memory")
    assert s.score == 0.0 and ("MemoryError" in (s.error or "") or "killed" in (s.error or ""))
    assert (await run(grader, "int")).score == 1.0


@shared_loop
async def test_fork_bomb_is_bounded_and_killed(grader: PythonGrader) -> None:
    s = await run(grader, "fork_bomb")
    assert s.score == 0.0 and "timed out" in (s.error or ""), s
    need(grader, "pidns", "private_proc")
    after = await run(grader, "leftovers")
    # Only the sandbox's init, the zygote and this grade's own process remain.
    assert after.error is None and after.sub_scores["processes"] <= 3, after

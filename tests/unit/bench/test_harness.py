"""bench/: one harness. Every runnable module is listed with its claim, no benchmark patches
``sys.path``, imports ``tests`` or loads another benchmark by path, and ``record`` writes a
stamped result."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.__main__ import main as bench_main
from bench.lib import harness
from bench.lib.registry import benchmarks, read

ROOT = Path(__file__).resolve().parents[3]
BENCH = ROOT / "bench"
SOURCES = sorted(p for p in BENCH.rglob("*.py") if "out" not in p.relative_to(BENCH).parts)


def has_main(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body)


def test_list_finds_every_module_with_a_main_and_states_its_claim() -> None:
    runnable = {p.stem for p in BENCH.glob("*.py") if p.stem != "__main__" and has_main(p)}
    listed = {b.name: b for b in benchmarks()}
    assert set(listed) == runnable
    assert len(listed) >= 25
    for b in listed.values():
        assert b.claim and len(b.claim) > 20, f"{b.name}: its docstring's first line must state the claim"
        assert b.quick is not None, f"{b.name}: no QUICK arguments for `run --quick`"
    # modules without a main live in bench/lib/, beside the harness
    assert not [p.name for p in BENCH.glob("*.py") if p.stem not in {"__init__", "__main__"} and not has_main(p)]


def test_list_prints_each_benchmark_with_its_claim(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_main(["list"]) == 0
    out = capsys.readouterr().out
    for b in benchmarks():
        assert f"{b.name}" in out and b.claim in out


def test_quick_skips_what_needs_a_gpu_vllm_ray_or_minutes_and_says_why(tmp_path: Path) -> None:
    (tmp_path / "needy.py").write_text('"""Claims something that needs a GPU, at length."""\n'
                                       'NEEDS = {"gpu"}\nQUICK = ["--n", "1"]\n\ndef main(argv=None):\n    pass\n')
    (tmp_path / "slow.py").write_text('"""Claims something that takes minutes of CPU."""\nSLOW = True\n'
                                      'QUICK: list[str] = []\n\ndef main(argv=None):\n    pass\n')
    (tmp_path / "helper.py").write_text('"""No main: not a benchmark."""\n')
    (tmp_path / "tiles.py").write_text('"""Claims something about AMX tiles, at length."""\nNEEDS = {"amx"}\n'
                                       'QUICK: list[str] = []\n\ndef main(argv=None):\n    pass\n')
    found = {b.name: b for b in benchmarks(tmp_path)}
    assert set(found) == {"needy", "slow", "tiles"}
    assert found["needy"].skip_reason() == "needs gpu" and found["needy"].quick == ["--n", "1"]
    assert found["needy"].skip_reason(frozenset(harness.CPU_FLAGS)) == "needs gpu"
    assert "slow" in (found["slow"].skip_reason() or "")
    assert found["tiles"].skip_reason(frozenset({"avx2"})) == "needs amx"
    assert found["tiles"].skip_reason(frozenset({"avx2", "amx_tile"})) is None
    assert read(tmp_path / "helper.py") is None


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.relative_to(BENCH).as_posix())
def test_no_bench_file_patches_sys_path_imports_tests_or_loads_a_benchmark_by_path(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name) \
                and node.value.id == "sys":
            pytest.fail(f"{path.name}:{node.lineno}: uses sys.path (run it as `python -m bench run ...`)")
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "tests":
            pytest.fail(f"{path.name}:{node.lineno}: imports tests (move what it needs to bench/lib or arft)")
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "tests" for a in node.names):
            pytest.fail(f"{path.name}:{node.lineno}: imports tests")
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in {
                "load_file", "spec_from_file_location", "run_path"}:
            arg = ast.unparse(node.args[0]) if node.args else ""
            assert '"bench"' not in arg and "__file__" not in arg, (
                f"{path.name}:{node.lineno}: loads a benchmark by path ({arg}); import it from bench.lib")


def test_record_writes_a_result_stamped_with_commit_date_cpu_and_versions(tmp_path: Path) -> None:
    path = harness.record("demo_bench", {"ratio": 1.5, "arms": {"a": [1.0, 2.0]}}, argv=["--n", "3"],
                          results=tmp_path)
    assert path == tmp_path / "demo_bench.json"
    body = json.loads(path.read_text())
    assert body["name"] == "demo_bench" and body["argv"] == ["--n", "3"]
    assert body["result"] == {"ratio": 1.5, "arms": {"a": [1.0, 2.0]}}
    stamp = body["stamp"]
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    if head.returncode == 0:
        assert stamp["commit"].removesuffix("+dirty") == head.stdout.strip()
    assert stamp["date"][:4].isdigit() and "T" in stamp["date"]
    assert stamp["cpu"] and set(stamp["cpu_flags"]) <= set(harness.CPU_FLAGS)
    assert stamp["python"] == ".".join(map(str, sys.version_info[:3]))
    assert "torch" in stamp and (stamp["load_avg_1min"] is None or stamp["load_avg_1min"] >= 0)


def test_alternate_takes_turns_and_medians_summarise() -> None:
    calls: list[str] = []
    measures = harness.alternate({"a": lambda: calls.append("a") or 1.0,
                                  "b": lambda: calls.append("b") or float(len(calls))}, repeats=3)
    assert calls == ["a", "b"] * 3
    assert measures == {"a": [1.0, 1.0, 1.0], "b": [2.0, 4.0, 6.0]}
    assert harness.medians(measures) == {"a": 1.0, "b": 4.0}
    text = harness.table(["arm", "median"], [["a", 1.0], ["b", 4.0]])
    assert text.splitlines()[0].split() == ["arm", "median"] and "4" in text.splitlines()[-1]
    assert harness.peak_rss_gb() > 0

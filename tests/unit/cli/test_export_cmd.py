"""`arft export`: JSONL on stdout (or a file), the count on stderr."""

from __future__ import annotations

import json
from pathlib import Path

from arft.tracing.store import RunStore
from tests.unit.cli.runner import flat, invoke
from tests.unit.tracing.factories import make_rollout


def stored_run(run: Path, n: int) -> set[str]:
    with RunStore(run / "arft.sqlite") as store:
        rollouts = [make_rollout(f"t{i}") for i in range(n)]
        for r in rollouts:
            store.add_rollout(r)
    return {r.trace_id for r in rollouts}


def test_export_writes_jsonl_to_stdout_and_the_count_to_stderr(tmp_path: Path) -> None:
    ids = stored_run(tmp_path, 3)
    out = invoke("export", str(tmp_path))
    assert out.exit_code == 0, out.output
    assert {json.loads(line)["trace_id"] for line in out.stdout.splitlines()} == ids
    assert out.stderr.strip() == "exported 3 rollouts"


def test_export_to_a_file(tmp_path: Path) -> None:
    ids = stored_run(tmp_path, 2)
    target = tmp_path / "rollouts.jsonl"
    out = invoke("export", str(tmp_path), "-o", str(target))
    assert out.exit_code == 0 and out.stdout == ""
    assert flat(out.stderr) == f"exported 2 rollouts to {target}"
    assert {json.loads(line)["trace_id"] for line in target.read_text().splitlines()} == ids


def test_export_of_a_folder_without_a_store_exits_2(tmp_path: Path) -> None:
    out = invoke("export", str(tmp_path))
    assert out.exit_code == 2 and "is not an arft run directory" in flat(out.stderr)

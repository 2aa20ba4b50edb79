"""RunStore on a real SQLite file: exact round trips, WAL, duplicates, metrics, bad files."""

from __future__ import annotations

import math
import sqlite3
import threading
from pathlib import Path

import pytest

from arft.records import Score
from arft.tracing.store import Discarded, DuplicateTraceIdError, NotAStoreError, RunStore, StoreError
from tests.unit.tracing.factories import make_rollout


def _full_rollout():
    score = Score(score=0.75, sub_scores={"f1": 0.5, "style": 1.0}, passed=False,
                  flags=("verbose",), latency_s=0.125, grader="multi")
    return make_rollout(score=score, calls=[("search", 0), ("read", 0), ("search", 1)],
                        n_tokens=12, parse_errors=1, failing={1})


def test_rollout_round_trips_exactly(tmp_path: Path) -> None:
    rollout = _full_rollout()
    assert rollout.logprobs and rollout.token_ids and sum(rollout.loss_mask) == 6
    with RunStore(tmp_path / "run.db") as store:
        store.create_run("run1", "eval", {"model": "m"})
        store.add_rollout(rollout)
        assert store.rollouts() == [rollout]
        assert store.rollouts("run1")[0] == rollout
        assert store.rollouts("other") == []
        assert store.rollout(rollout.trace_id) == rollout
    # and again from a fresh connection on the same file
    with RunStore(tmp_path / "run.db") as store:
        assert store.rollouts()[0] == rollout


def test_columns_and_child_tables_are_queryable(tmp_path: Path) -> None:
    rollout = _full_rollout()
    path = tmp_path / "run.db"
    with RunStore(path) as store:
        store.add_rollout(rollout)
    con = sqlite3.connect(path)
    row = con.execute("SELECT reward, n_tool_calls, n_turns, parse_errors, n_tokens, "
                      "n_sampled_tokens, status FROM rollouts").fetchone()
    assert row == (0.75, 3, 3, 1, 12, 6, "ok")
    calls = con.execute("SELECT call_id, name, status, error, turn FROM tool_calls "
                        "WHERE trace_id = ? ORDER BY id", (rollout.trace_id,)).fetchall()
    assert calls == [("call_0", "search", "ok", None, 0),
                     ("call_1", "read", "tool_error", "boom", 0),
                     ("call_2", "search", "ok", None, 1)]
    grade = con.execute("SELECT grader, score, passed, flags, sub_scores FROM grades").fetchone()
    assert grade == ("multi", 0.75, 0, '["verbose"]', '{"f1": 0.5, "style": 1.0}')
    con.close()


def test_ungraded_and_grader_error_rewards_are_null(tmp_path: Path) -> None:
    ungraded = make_rollout()
    broken = make_rollout(score=Score(score=0.0, error="grader crashed"))
    infra = make_rollout(score=Score(score=1.0)).model_copy(update={"status": "infra_failed"})
    assert ungraded.reward is None and broken.reward is None and infra.reward is None
    assert make_rollout(score=Score(score=0.0)).reward == 0.0  # a real 0 stays a 0
    path = tmp_path / "run.db"
    with RunStore(path) as store:
        store.add_rollout(ungraded)
        store.add_rollout(broken)
    con = sqlite3.connect(path)
    assert con.execute("SELECT reward FROM rollouts").fetchall() == [(None,), (None,)]
    assert con.execute("SELECT count(*) FROM grades").fetchone() == (1,)
    con.close()


def test_wal_and_foreign_keys_are_on(tmp_path: Path) -> None:
    with RunStore(tmp_path / "run.db") as store:
        conn = store._conn
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1


def test_duplicate_trace_id_is_an_error_and_writes_nothing(tmp_path: Path) -> None:
    rollout = _full_rollout()
    path = tmp_path / "run.db"
    with RunStore(path) as store:
        store.add_rollout(rollout)
        with pytest.raises(DuplicateTraceIdError, match=rollout.trace_id):
            store.add_rollout(rollout)
        assert store.rollouts() == [rollout]
    con = sqlite3.connect(path)
    assert con.execute("SELECT count(*) FROM tool_calls").fetchone() == (3,)
    con.close()


def test_nan_score_is_refused_before_it_poisons_the_store(tmp_path: Path) -> None:
    with RunStore(tmp_path / "run.db") as store:
        with pytest.raises(StoreError, match="Score.error"):
            store.add_rollout(make_rollout(score=Score(score=float("nan"))))
        assert store.rollouts() == []


def test_unknown_trace_id_says_how_to_find_ids(tmp_path: Path) -> None:
    with RunStore(tmp_path / "run.db") as store:
        with pytest.raises(KeyError, match="RunStore.rollouts"):
            store.rollout("trace_nope")


def test_runs_lifecycle(tmp_path: Path) -> None:
    with RunStore(tmp_path / "run.db") as store:
        store.create_run("r1", "train", {"model": "m", "seed": 3})
        store.create_run("r2", "eval", {})
        assert store.has_run("r1") and not store.has_run("r3")
        with pytest.raises(StoreError, match="already exists"):
            store.create_run("r1", "train", {})
        with pytest.raises(StoreError, match="JSON-serialisable"):
            store.create_run("r4", "eval", {"x": object()})
        store.finish_run("r1", "completed")
        with pytest.raises(KeyError, match="create_run"):
            store.finish_run("nope", "failed")
        runs = store.runs()
    assert [(r["run_id"], r["kind"], r["status"]) for r in runs] == [
        ("r1", "train", "completed"), ("r2", "eval", "running")]
    assert runs[0]["job"] == {"model": "m", "seed": 3}
    assert runs[0]["finished_at"] is not None and runs[1]["finished_at"] is None


def test_metrics_stored_and_read(tmp_path: Path) -> None:
    with RunStore(tmp_path / "run.db") as store:
        store.create_run("r1", "train", {})
        store.add_metrics("r1", 2, {"reward": 0.5, "loss": float("nan")})
        store.add_metrics("r1", 1, {"reward": 0.25}, trace_id="trace_abc")
        with pytest.raises(StoreError, match="create_run"):
            store.add_metrics("ghost", 0, {"reward": 1.0})
        rows = store.metrics("r1")
    assert [(r["step"], r["name"], r["trace_id"]) for r in rows] == [
        (1, "reward", "trace_abc"), (2, "reward", None), (2, "loss", None)]
    assert rows[0]["value"] == 0.25 and rows[1]["value"] == 0.5
    assert math.isnan(rows[2]["value"])


def test_discard_after_drops_a_runs_later_records_in_one_transaction(tmp_path: Path) -> None:
    def at(step: int, run_id: str = "train", **kw: object):
        r = make_rollout(run_id=run_id, score=Score(score=0.5), calls=[("search", 0), ("read", 1)], **kw)
        return r.model_copy(update={"step": step})

    with RunStore(tmp_path / "run.db") as store:
        for run_id, kind in [("train", "train"), ("train:eval-000002", "eval"), ("train:eval-000004", "eval"),
                             ("other", "train")]:
            store.create_run(run_id, kind, {})
        kept = [at(1), at(2), at(2, "train:eval-000002"), at(4, "other")]
        for r in kept + [at(3), at(3), at(4), at(4, "train:eval-000004")]:
            store.add_rollout(r)
        for step in (1, 2, 3, 4):
            store.add_metrics("train", step, {"reward": 0.5, "loss": 1.0})
            store.add_metrics("other", step, {"reward": 0.5})
        store.add_metrics("train:eval-000004", 4, {"reward": 1.0})
        store.finish_run("train", "completed")
        with pytest.raises(ValueError, match="being resumed"):
            store.discard_after("train", 2, ["train"])
        gone = store.discard_after("train", 2, ["train:eval-000004"])
        assert gone == Discarded(rollouts=4, tool_calls=8, grades=4, metrics=5, runs=1) and gone.total == 22
        assert sorted(r.trace_id for r in store.rollouts()) == sorted(r.trace_id for r in kept)
        assert [(m["step"], m["name"]) for m in store.metrics("train")] == [
            (1, "reward"), (1, "loss"), (2, "reward"), (2, "loss")]
        assert len(store.metrics("other")) == 4  # another run's rows are not touched
        assert {r["run_id"]: r["status"] for r in store.runs()} == {
            "train": "running", "train:eval-000002": "running", "other": "running"}
        assert store.discard_after("train", 2) == Discarded()  # idempotent: a second resume finds nothing
    con = sqlite3.connect(tmp_path / "run.db")  # no orphan child rows
    assert con.execute("SELECT count(*) FROM tool_calls").fetchone() == (8,)
    assert con.execute("SELECT count(*) FROM grades").fetchone() == (4,)
    con.close()


def test_not_an_arft_store(tmp_path: Path) -> None:
    text = tmp_path / "notes.db"
    text.write_text("hello, I am not a database" * 100)
    with pytest.raises(NotAStoreError, match="not an arft run store"):
        RunStore(text)
    other = tmp_path / "other.db"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE users (id INTEGER)")
    con.commit()
    con.close()
    with pytest.raises(NotAStoreError, match="users"):
        RunStore(other)


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "run.db"
    RunStore(path).close()
    con = sqlite3.connect(path)
    con.execute("UPDATE arft_meta SET value = '99' WHERE key = 'schema_version'")
    con.commit()
    con.close()
    with pytest.raises(NotAStoreError, match="upgrade arft"):
        RunStore(path)


def test_schema_1_store_is_upgraded_and_keeps_its_rollouts(tmp_path: Path) -> None:
    """A store written before ``rollouts.step`` existed opens, keeps its rows and gains the column."""
    path = tmp_path / "run.db"
    old = make_rollout(task_id="old")
    with RunStore(path) as store:
        store.add_rollout(old)
    con = sqlite3.connect(path)  # turn it back into a schema-1 store
    con.execute("DROP INDEX rollouts_step")
    con.execute("ALTER TABLE rollouts DROP COLUMN step")
    con.execute("UPDATE arft_meta SET value = '1' WHERE key = 'schema_version'")
    con.commit()
    con.close()
    new = make_rollout(task_id="new").model_copy(update={"step": 3})
    with RunStore(path) as store:
        store.add_rollout(new)
        assert [r.task_id for r in store.rollouts()] == ["old", "new"]
        assert store.rollout(new.trace_id).step == 3
    con = sqlite3.connect(path)
    assert con.execute("SELECT task_id, step FROM rollouts ORDER BY rowid").fetchall() == [("old", None), ("new", 3)]
    assert con.execute("SELECT value FROM arft_meta WHERE key = 'schema_version'").fetchone() == ("2",)


def test_writes_from_worker_threads(tmp_path: Path) -> None:
    rollouts = [make_rollout(task_id=f"t{i}", calls=[("search", 0)]) for i in range(20)]
    with RunStore(tmp_path / "run.db") as store:
        threads = [threading.Thread(target=store.add_rollout, args=(r,)) for r in rollouts]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stored = store.rollouts()
    assert sorted(r.trace_id for r in stored) == sorted(r.trace_id for r in rollouts)


def test_discard_after_can_drop_the_rows_of_an_evaluation_cut_short_at_the_checkpoints_step(tmp_path: Path) -> None:
    with RunStore(tmp_path / "run.db") as store:
        store.create_run("train", "train", {})
        store.add_metrics("train", 2, {"train/reward_mean": 0.5, "update/tokens": 9.0})
        store.add_metrics("train", 2, {"eval/reward_mean": 0.25, "eval/pass_rate": 0.0})
        store.add_metrics("train", 1, {"eval/reward_mean": 0.125})
        gone = store.discard_after("train", 2, metrics_at_step="eval/")
        assert gone == Discarded(metrics=2)
        assert sorted((m["step"], m["name"]) for m in store.metrics("train")) == [
            (1, "eval/reward_mean"), (2, "train/reward_mean"), (2, "update/tokens")]
        assert store.discard_after("train", 2, metrics_at_step="eval/") == Discarded()

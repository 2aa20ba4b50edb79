"""The store's ``events`` table: written and read back per run, dropped with a resume's rewind,
and added to a store written before it existed without touching its schema version."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from arft.tracing.store import RunStore, StoreError


def test_events_round_trip_and_are_filtered_by_kind(tmp_path: Path) -> None:
    with RunStore(tmp_path / "run.db") as store:
        store.create_run("train", "train", {})
        store.add_event("train", 3, "monitor", "equal_groups", "every group equal", {"value": 1.0})
        store.add_event("train", 1, "other", "x", "y")
        events = store.events("train", "monitor")
        assert [(e["step"], e["name"], e["message"], e["data"]) for e in events] == [
            (3, "equal_groups", "every group equal", {"value": 1.0})]
        assert [e["step"] for e in store.events("train")] == [1, 3]
        with pytest.raises(StoreError, match="unknown run"):
            store.add_event("nope", 1, "monitor", "x", "y")


def test_a_rewind_drops_the_events_after_the_checkpoint(tmp_path: Path) -> None:
    with RunStore(tmp_path / "run.db") as store:
        store.create_run("train", "train", {})
        for step in (1, 2, 3):
            store.add_event("train", step, "monitor", "m", f"at {step}")
        dropped = store.discard_after("train", 2)
        assert dropped.events == 1 and dropped.total == 1
        assert [e["step"] for e in store.events("train")] == [1, 2]


def test_a_store_without_the_events_table_gains_it_when_opened(tmp_path: Path) -> None:
    path = tmp_path / "run.db"
    with RunStore(path) as store:
        store.create_run("train", "train", {})
    con = sqlite3.connect(path)
    con.execute("DROP TABLE events")
    con.commit()
    con.close()
    with RunStore(path) as store:
        assert store.events("train") == []
        store.add_event("train", 1, "monitor", "m", "fired")
        assert len(store.events("train")) == 1
    con = sqlite3.connect(path)
    assert con.execute("SELECT value FROM arft_meta WHERE key = 'schema_version'").fetchone() == ("2",)
    con.close()

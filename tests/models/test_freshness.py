"""The newest row per node and source, read from ``event_summary`` as ingest keeps it.

Every database here is written by the real ingest path (``ingest_paths`` over log files written
in ``tmp_path``, ``Store.insert_summarized`` for pulled samples), never by inserting summary rows
by hand; the expected rows come from the constants the files were written from.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import polars as pl

from faultlens.ingest.pipeline import ingest_paths
from faultlens.ingest.schema import SCHEMA_VERSION, TABLES
from faultlens.ingest.store import Store
from faultlens.models.freshness import (
    default_as_of,
    newest_data,
    quiet_sources,
    source_last_seen,
    source_last_seen_full,
)

T = datetime(2026, 5, 1)
H = timedelta(hours=1)
NOW = datetime(2026, 6, 1)


def _xid(ts: datetime, node: str) -> str:
    return (
        f"{ts:%Y-%m-%dT%H:%M:%S}+00:00 {node} kernel: NVRM: Xid (PCI:0000:3b:00): 79, "
        "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
    )


def _write(path: Path, *lines: tuple[datetime, str]) -> Path:
    with path.open("a") as f:
        for ts, node in lines:
            f.write(_xid(ts, node))
    return path


def _ingest(store: Store, *paths: Path) -> None:
    report = ingest_paths(store, [str(p) for p in paths], now=NOW)
    assert all(f.status in ("ok", "unchanged") for f in report.files), report.files


def _samples(store: Store, ts: datetime, node: str) -> None:
    frame = pl.DataFrame(
        {"ts": [ts], "node": [node], "gpu": [0], "metric": ["DCGM_FI_DEV_GPU_TEMP"]}
        | {"value": [60.0]}
    )
    store.insert_summarized("telemetry", frame, "prometheus:http://p:9090")


def test_last_seen_follows_ingest_appends_and_reparse(tmp_path: Path) -> None:
    a = _write(tmp_path / "a.log", (T - 50 * H, "n1"), (T - 40 * H, "n2"))
    b = _write(tmp_path / "b.log", (T - 45 * H, "n1"))
    with Store(tmp_path / "f.duckdb") as store:
        _ingest(store, a, b)
        _samples(store, T - 30 * H, "n1")
        first = source_last_seen(store)
        assert first.rows() == [
            ("n1", "kernel", T - 45 * H),  # b.log's line is n1's newest kernel line
            ("n1", "telemetry", T - 30 * H),
            ("n2", "kernel", T - 40 * H),
        ]
        assert first.equals(source_last_seen_full(store))
        # a grown log: a newer line of n2, an older one of n1 (changes nothing), a new node
        _write(tmp_path / "a.log", (T - 10 * H, "n2"), (T - 60 * H, "n1"), (T - 5 * H, "n3"))
        _ingest(store, a, b)
        second = source_last_seen(store)
        assert second.rows() == [
            ("n1", "kernel", T - 45 * H),
            ("n1", "telemetry", T - 30 * H),
            ("n2", "kernel", T - 10 * H),
            ("n3", "kernel", T - 5 * H),
        ]
        assert second.equals(source_last_seen_full(store))
        assert newest_data(store) == T - 5 * H
        assert default_as_of(store) == T - 5 * H + timedelta(seconds=1)
        # a file's rows deleted (what --reparse does first): its lines are no longer a last-seen
        with store.transaction():
            store.forget_file(str(b))
        third = source_last_seen(store)
        assert ("n1", "kernel", T - 50 * H) in third.rows()
        assert ("n1", "kernel", T - 45 * H) not in third.rows()
        assert third.equals(source_last_seen_full(store))


def test_reading_writes_nothing_and_a_reader_sees_the_same(tmp_path: Path) -> None:
    a = _write(tmp_path / "a.log", (T - 3 * H, "n1"))
    db = tmp_path / "f.duckdb"
    with Store(db) as store:
        _ingest(store, a)
        source_last_seen(store)
    _write(a, (T - H, "n1"))
    with Store(db) as store:
        _ingest(store, a)
    with Store(db, read_only=True) as ro:
        assert source_last_seen(ro).rows() == [("n1", "kernel", T - H)]
        assert source_last_seen(ro).equals(source_last_seen_full(ro))


def test_events_without_a_node_or_time_are_never_a_last_seen(tmp_path: Path) -> None:
    log = tmp_path / "dmesg.log"  # dmesg stamps: boot-relative, no time without a boot time
    log.write_text(
        "[  100.500000] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
        "GPU has fallen off the bus.\n"
    )
    a = _write(tmp_path / "a.log", (T - 2 * H, "n1"))
    with Store(tmp_path / "f.duckdb") as store:
        _ingest(store, log, a)
        assert store.scalar("SELECT count(*) FROM events WHERE ts IS NULL") == 1
        assert source_last_seen(store).rows() == [("n1", "kernel", T - 2 * H)]
        assert newest_data(store) == T - 2 * H


def test_logs_stopped_from_the_summary(tmp_path: Path) -> None:
    a = _write(tmp_path / "a.log", (T - 50 * H, "n1"), (T - H, "n2"))
    with Store(tmp_path / "f.duckdb") as store:
        _ingest(store, a)
        _samples(store, T - 20 * H, "n1")
        _samples(store, T - H, "n2")
        seen = source_last_seen(store)
    found = quiet_sources(seen, now=T, quiet_h=6)
    # n1's telemetry stopped 20 h ago while n2's goes on; n1's quiet kernel log raises nothing
    assert [(q["node"], q["source"], q["age_h"]) for q in found] == [("n1", "telemetry", 20.0)]
    later = quiet_sources(seen, now=T + 10 * H, quiet_h=6)
    assert {(q["node"], q["source"]) for q in later} == {(None, "kernel"), (None, "telemetry")}


def test_the_old_rollup_tables_are_dropped_by_the_migration(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE schema_version (version INTEGER)")
    con.execute("INSERT INTO schema_version VALUES (4)")
    for table in TABLES.values():
        con.execute(table.ddl())
    con.execute("CREATE TABLE source_last_seen (node VARCHAR, source VARCHAR, last_seen TIMESTAMP)")
    con.execute("CREATE TABLE source_last_seen_marks (tbl VARCHAR, max_rowid BIGINT)")
    con.close()
    with Store(path) as store:
        assert not store.has_table("source_last_seen")
        assert not store.has_table("source_last_seen_marks")
        assert store.scalar("SELECT max(version) FROM schema_version") == SCHEMA_VERSION

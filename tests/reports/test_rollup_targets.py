"""Failure events (``models.target``) read from ``rollup_notable`` are those read from ``events``.

Readers select them from the rollup copy (the snapshot's ``notable_table``), so that copy must
hold every event any rule of ``TARGET_EVENT_SQL`` can pick, whatever its severity (parsers leave
it unset or ``info`` for many hardware lines), and none may be lost or added.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import polars as pl

from faultlens.ingest import rollups
from faultlens.ingest.store import Store
from faultlens.models.target import target_events
from faultlens.reports.snapshot import SnapshotReader

T0 = datetime(2026, 5, 1)
# (kind, code, subkind, severity, message): one per rule of TARGET_EVENT_SQL, most not notable by
# severity; then events no rule picks (they must stay out of both).
PICKED = [
    ("xid", 79, None, None, "GPU has fallen off the bus"),
    ("xid", 48, None, "info", "DBE"),
    ("xid", 74, None, None, "NVLink: fatal error detected"),
    ("nvlink", None, "fatal", "info", "link 3"),
    ("fallen_off_bus", None, None, None, "fallen off the bus"),
    ("gpu_init_fail", None, None, "info", "RmInitAdapter failed"),
    ("reset_required", None, None, None, "GPU reset required"),
    ("kernel_panic", None, None, None, "Kernel panic - not syncing"),
    ("row_remap", None, "remap failure", None, "row remapping failed"),
    ("ecc", None, "DBE", "info", "double bit error"),
    ("pcie", None, None, "critical", "AER uncorrectable"),
    ("node_drain", None, "gpu xid 79", None, "drained: gpu xid 79"),
    ("node_down", None, "not responding", "info", "node down"),
]
NOT_PICKED = [
    ("xid", 13, None, "info", "graphics engine exception"),
    ("nvlink", None, "nonfatal", None, "link 1 replay"),
    ("ecc", None, "SBE", None, "single bit error"),
    ("node_drain", None, "faultlens: predicted", None, "drained by faultlens"),
    ("diag", None, None, "info", "dcgmi diag pass"),
]


def _events() -> pl.DataFrame:
    rows = []
    for i, (kind, code, subkind, severity, message) in enumerate(PICKED + NOT_PICKED):
        rows.append(
            {
                "ts": T0 + timedelta(hours=3 * i),
                "node": f"gpu{i % 3:02d}",
                "gpu": "0000:3b:00.0",
                "source": "slurm" if kind.startswith("node_") else "kernel",
                "kind": kind,
                "code": code,
                "subkind": subkind,
                "severity": severity,
                "message": message,
                "file": "/logs/t.log",
                "line": i + 1,
            }
        )
    return pl.DataFrame(rows)


def test_every_failure_event_is_in_the_notable_copy(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    with Store(db) as store:
        store.insert("events", _events())
        rollups.maintain(store)
        lo, hi = T0 - timedelta(days=1), T0 + timedelta(days=30)
        from_events = target_events(store, lo, hi, events="events").sort("ts")
        from_copy = target_events(store, lo, hi, events="rollup_notable").sort("ts")
    assert from_events.height == len(PICKED)  # the fixture exercises every rule
    assert from_copy.to_dicts() == from_events.to_dicts()


def test_a_snapshot_reads_failure_events_from_the_copy(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    with Store(db) as store:
        store.insert("events", _events())
    reader = SnapshotReader(db, tmp_path / "snaps")
    try:
        snap = reader.refresh()
        assert snap is not None and snap.store.notable_table == "rollup_notable"
        got = target_events(snap.store, T0 - timedelta(days=1), T0 + timedelta(days=30))
        assert got.height == len(PICKED)
    finally:
        reader.close()


def test_fleet_and_rate_from_the_day_counts_equal_those_from_events(tmp_path: Path) -> None:
    """``models.fleet`` reads the nodes that log (and the data's span) from ``rollup_node_day``
    on a reader's view, for whole-day windows of the site's own data: the same fleet and rate."""
    from faultlens.models.fleet import data_window, fleet
    from faultlens.models.reliability import failure_rate_in
    from tests.reports import smalldb

    db = smalldb.build(tmp_path / "small.duckdb")
    with Store(db) as store:
        store.execute("DELETE FROM nodes")  # the fleet model then counts the nodes that log
        store.execute("DELETE FROM gpus")
        late = smalldb.START + timedelta(days=5, hours=2)  # a node that logs on one day only
        store.insert("events", pl.DataFrame({"ts": [late], "node": ["gpu099"], "kind": ["xid"]}))
        rollups.maintain(store)
    reader = SnapshotReader(db, tmp_path / "snaps")
    try:
        snap = reader.refresh()
        assert snap is not None and snap.store.node_day_table == "rollup_node_day"
        raw = Store(snap.path, read_only=True)  # the same file, read without the rollups
        days = smalldb.START, smalldb.START + timedelta(days=3)
        later = smalldb.START + timedelta(days=5), smalldb.START + timedelta(days=6)
        hours = smalldb.START + timedelta(hours=5), smalldb.START + timedelta(days=2, hours=7)
        assert data_window(snap.store, "site") == data_window(raw, "site")
        for window in (None, days, later, hours):
            assert fleet(snap.store, window=window) == fleet(raw, window=window), window
            got = failure_rate_in(snap.store, window=window)
            want = failure_rate_in(raw, window=window)
            assert got.per_1000_node_days == want.per_1000_node_days, window
        assert fleet(raw, window=days).nodes == len(smalldb.NODES)  # every node logs daily
        assert fleet(snap.store, window=later).nodes == len(smalldb.NODES) + 1
        raw.close()
    finally:
        reader.close()

"""The snapshot's rollup tables answer exactly what the raw ``events`` table answers."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from faultlens.ingest.store import Store
from faultlens.reports import q_detail, q_fleet, rollups
from faultlens.reports.filters import Filters
from faultlens.reports.snapshot import SnapshotReader, SnapshotStore
from tests.reports import smalldb

DAY = timedelta(days=1)
WEEK = Filters(since=smalldb.START, until=smalldb.END)
DGX = Filters(since=smalldb.START, until=smalldb.END, nodes=("dgx-b-01", "dgx-b-02"))
MIDWEEK = Filters(since=smalldb.START + 2 * DAY, until=smalldb.START + 5 * DAY)
ODD = Filters(since=smalldb.START + timedelta(hours=30, minutes=7), until=smalldb.END)
GPU = Filters(since=smalldb.START, until=smalldb.END, gpu="0000:3b:00.0")
CASES = [WEEK, DGX, MIDWEEK, ODD, GPU]


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[Store, SnapshotStore]]:
    db = smalldb.build(tmp_path / "small.duckdb")
    reader = SnapshotReader(db, tmp_path / "snaps")
    snap = reader.refresh()
    assert snap is not None
    with Store(db, read_only=True) as raw:
        yield raw, snap.store
    reader.close()


def _same(a: pl.DataFrame, b: pl.DataFrame, *by: str) -> None:
    if by:
        a, b = a.sort(*by), b.sort(*by)
    assert_frame_equal(a, b, check_dtypes=False)


def test_snapshot_has_rollups_with_the_event_counts(stores) -> None:  # noqa: ANN001
    raw, snap = stores
    assert snap.rollups and not rollups.available(raw)
    n_events = len(smalldb.events())
    assert snap.scalar("SELECT sum(n) FROM rollup_fleet_hour") == n_events
    assert snap.scalar("SELECT sum(n) FROM rollup_node_day") == n_events
    # 3 critical Xids, the drain and the resume, the NCCL timeout, the 3 Xid 13 events
    notable = raw.scalar(
        "SELECT count(*) FROM events WHERE severity IN ('warning', 'error', "
        "'critical') OR kind IN ('node_down', 'node_drain', "
        "'node_not_responding', 'node_resume')"
    )
    assert snap.scalar("SELECT count(*) FROM rollup_notable") == notable == 9
    from faultlens.models.target import target_events

    # 3 Xids, the drain, job 102; read from rollup_notable on the snapshot
    assert snap.notable_table == "rollup_notable"
    assert target_events(snap, smalldb.START - DAY, smalldb.END + DAY).height == 5


def test_fleet_queries_agree(stores) -> None:  # noqa: ANN001
    raw, snap = stores
    assert q_fleet.data_range(snap) == q_fleet.data_range(raw)
    assert q_fleet.node_list(snap) == q_fleet.node_list(raw) == sorted(smalldb.NODES)
    for f in CASES:
        _same(
            q_fleet.episodes_in(snap, f.since, f.until),
            q_fleet.episodes_in(raw, f.since, f.until),
            "node",
            "ts",
        )
        _same(q_fleet.top_xids(snap, f), q_fleet.top_xids(raw, f))
        assert q_fleet.event_count(snap, f) == q_fleet.event_count(raw, f)
        for by in ("kind", "source", "severity"):
            _same(q_fleet.event_timeline(snap, f, by=by), q_fleet.event_timeline(raw, f, by=by))
    facets = {"severity": ("critical", "error"), "code": (79, 48, 13)}
    for f in CASES:
        assert q_fleet.event_count(snap, f, facets) == q_fleet.event_count(raw, f, facets)
        _same(q_fleet.event_timeline(snap, f, facets), q_fleet.event_timeline(raw, f, facets))
        for name, frame in q_fleet.event_facets(snap, f.since, f.until).items():
            _same(frame, q_fleet.event_facets(raw, f.since, f.until)[name])
    assert q_fleet.event_count(snap, WEEK, {"code": (79, 48)}) == 2


def test_rollups_are_used_only_where_exact() -> None:
    class Snap:
        rollups = True

    s = Snap()
    assert rollups.grain_for(s, WEEK) == "fleet"  # type: ignore[arg-type]
    assert rollups.grain_for(s, DGX) == "node"  # type: ignore[arg-type]
    assert rollups.grain_for(s, WEEK, per_node=True) == "node"  # type: ignore[arg-type]
    assert rollups.grain_for(s, ODD) is None  # type: ignore[arg-type]
    assert rollups.grain_for(s, GPU) is None  # type: ignore[arg-type]
    assert rollups.grain_for(s, WEEK, search="xid") is None  # type: ignore[arg-type]
    # a node filter with hourly bars needs hours per node: the raw table
    assert rollups.grain_for(s, DGX, bucket="6 hours") is None  # type: ignore[arg-type]


def test_node_queries_agree(stores) -> None:  # noqa: ANN001
    raw, snap = stores
    for node in ("gpu002", "dgx-b-01", "gpu003"):
        for f in CASES:
            _same(
                q_detail.node_summary(snap, node, f),
                q_detail.node_summary(raw, node, f),
                "kind",
                "severity",
            )
            _same(q_detail.node_events(snap, node, f), q_detail.node_events(raw, node, f))
            _same(
                q_detail.node_event_points(snap, node, f), q_detail.node_event_points(raw, node, f)
            )
            _same(q_detail.node_outages(snap, node, f), q_detail.node_outages(raw, node, f))
    for f in CASES:
        _same(q_detail.calibration(snap, f), q_detail.calibration(raw, f))
        assert q_detail.node_to_look_at(snap, f) == q_detail.node_to_look_at(raw, f)
    # two critical Xids on gpu002; on dgx-b only dgx-b-01 has one
    assert q_detail.node_to_look_at(snap, WEEK) == "gpu002"
    assert q_detail.node_to_look_at(snap, DGX) == "dgx-b-01"
    summary = q_detail.node_summary(snap, "gpu002", WEEK)
    xid = summary.filter(pl.col("kind") == "xid").row(0, named=True)
    assert (xid["events"], xid["first"], xid["last"]) == (2, smalldb.XID79_TS, smalldb.XID48_TS)

"""The newest row per node and source: the incremental rollup against a scan of every row."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

import polars as pl

from faultlens.ingest.store import Store
from faultlens.models.freshness import source_last_seen, source_last_seen_full
from tests.models.synthetic import insert_events

T = datetime(2026, 5, 1)
H = timedelta(hours=1)


def _ev(ts: datetime, node: str, source: str = "kernel", line: int = 1) -> dict:
    return {
        "ts": ts,
        "node": node,
        "source": source,
        "kind": "xid",
        "code": 63,
        "severity": "warning",
        "file": f"/logs/{node}.{source}.log",
        "line": line,
    }


def _temp(ts: datetime, node: str) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "ts": [ts],
            "node": [node],
            "gpu": [0],
            "metric": ["DCGM_FI_DEV_GPU_TEMP"],
            "value": [60.0],
        }
    )


def _rebuilt(caplog) -> bool:
    found = any("rebuilding the rollup" in r.getMessage() for r in caplog.records)
    caplog.clear()
    return found


def test_rollup_follows_appends_and_rebuilds_after_a_delete(tmp_path, caplog) -> None:
    caplog.set_level(logging.INFO, logger="faultlens.models.freshness")
    db = tmp_path / "f.duckdb"
    with Store(db) as store:
        insert_events(store, [_ev(T - 50 * H, "n1"), _ev(T - 40 * H, "n2", "slurm")])
        store.insert("telemetry", _temp(T - 30 * H, "n1"))
        first = source_last_seen(store)
        assert _rebuilt(caplog)  # no rollup yet
        assert first.rows() == [
            ("n1", "kernel", T - 50 * H),
            ("n1", "telemetry", T - 30 * H),
            ("n2", "slurm", T - 40 * H),
        ]
        # nothing new: the stored rollup, no rebuild
        assert source_last_seen(store).equals(first)
        assert not _rebuilt(caplog)
        # appended rows: a newer kernel line on n1, an older one on n2 (changes nothing), a new
        # node, a telemetry sample, an event without a time (kept, never a last-seen)
        insert_events(
            store,
            [
                _ev(T - 10 * H, "n1", line=2),
                _ev(T - 45 * H, "n2", "slurm", line=2),
                _ev(T - 5 * H, "n3", "nccl"),
                {**_ev(T, "n1", line=3), "ts": None},
            ],
        )
        store.insert("telemetry", _temp(T - 2 * H, "n1"))
        second = source_last_seen(store)
        assert not _rebuilt(caplog)
        assert second.rows() == [
            ("n1", "kernel", T - 10 * H),
            ("n1", "telemetry", T - 2 * H),
            ("n2", "slurm", T - 40 * H),
            ("n3", "nccl", T - 5 * H),
        ]
        assert second.equals(source_last_seen_full(store))
        # a reparse deletes a file's rows: the marks no longer hold, the rollup is rebuilt
        store.execute("DELETE FROM events WHERE file = ?", ["/logs/n1.kernel.log"])
        third = source_last_seen(store)
        assert _rebuilt(caplog)
        assert ("n1", "kernel", T - 10 * H) not in third.rows()
        assert third.equals(source_last_seen_full(store))
        # an old event given a time (a learned boot time) also rebuilds
        insert_events(store, [{**_ev(T, "n4"), "ts": None}])
        source_last_seen(store)
        caplog.clear()
        store.execute("UPDATE events SET ts = ? WHERE node = 'n4'", [T - H])
        fourth = source_last_seen(store)
        assert _rebuilt(caplog)
        assert ("n4", "kernel", T - H) in fourth.rows()


def test_a_read_only_reader_adds_the_rows_appended_since_the_last_save(tmp_path, caplog) -> None:
    caplog.set_level(logging.INFO, logger="faultlens.models.freshness")
    db = tmp_path / "f.duckdb"
    with Store(db) as store:
        insert_events(store, [_ev(T - 50 * H, "n1"), _ev(T - 40 * H, "n2", "slurm")])
        store.insert("telemetry", _temp(T - 30 * H, "n1"))
        source_last_seen(store)
    with Store(db) as store:
        insert_events(store, [_ev(T + H, "n2", "slurm", line=3)])
    caplog.clear()
    with Store(db, read_only=True) as ro:
        seen = source_last_seen(ro)
        assert not _rebuilt(caplog)
        assert seen.rows() == [
            ("n1", "kernel", T - 50 * H),
            ("n1", "telemetry", T - 30 * H),
            ("n2", "slurm", T + H),
        ]
        assert seen.equals(source_last_seen_full(ro))
        # nothing was written: the stored rollup still ends before the appended row
        stored = ro.query("SELECT last_seen FROM source_last_seen WHERE node = 'n2'")
        assert stored.item() == T - 40 * H

"""Suggested drains and what followed: predictions rows, slurmctld and kernel logs ingested by the
real parsers into a real DuckDB file, outcomes decided as the data grows."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import polars as pl

from faultlens.ingest.catalog import load_catalog
from faultlens.ingest.pipeline import ingest_paths
from faultlens.ingest.store import Store
from faultlens.models.drains import DrainOutcome, drain_summary, update_drain_outcomes

T = datetime(2026, 3, 10, 12, 0, 0)  # the first run's as_of
H = timedelta(hours=1)
HORIZON_H = 24.0
NOW = datetime(2026, 6, 1)


def _predictions(store: Store, made_at: datetime, actions: dict[str, str]) -> None:
    """One run's node rows (``actions``: node -> action) and a GPU row each (never a drain)."""
    nodes = list(actions)
    frame = pl.DataFrame(
        {
            "run_id": [f"run-{made_at:%H%M}"] * (2 * len(nodes)),
            "made_at": [made_at] * (2 * len(nodes)),
            "node": nodes + nodes,
            "gpu": [None] * len(nodes) + ["0"] * len(nodes),
            "target": ["failure"] * (2 * len(nodes)),
            "horizon": [HORIZON_H] * (2 * len(nodes)),
            "score": [0.9] * (2 * len(nodes)),
            "action": [actions[n] for n in nodes] + ["drain_now"] * len(nodes),
        },
        schema_overrides={"gpu": pl.String},
    )
    store.insert("predictions", frame)


def _stamp(ts: datetime) -> str:
    return ts.strftime("[%Y-%m-%dT%H:%M:%S.000]")


def _ingest(store: Store, path: Path, lines: list[str]) -> None:
    with path.open("a") as f:
        f.write("".join(line + "\n" for line in lines))
    report = ingest_paths(store, [str(path)], now=NOW)
    assert all(r.status == "ok" for r in report.files), report.files


def test_drains_that_happened_and_what_followed(tmp_path) -> None:
    db = tmp_path / "d.duckdb"
    ctld, kern = tmp_path / "slurmctld.log", tmp_path / "kern.log"
    with Store(db) as store:
        store.load_xid_catalog(load_catalog())
        # run 1: four nodes to drain, one to watch; run 2 (30 min later) repeats gpu001
        _predictions(
            store,
            T,
            {
                "gpu001": "drain_now",  # drained, then falls off the bus: confirmed
                "gpu002": "drain_after_jobs",  # drained, nothing follows
                "gpu003": "drain_after_jobs",  # left in service, falls off the bus
                "gpu004": "drain_now",  # left in service, nothing follows
                "gpu005": "watch",  # not a drain suggestion
            },
        )
        _predictions(store, T + H / 2, {"gpu001": "drain_now"})
        _ingest(
            store,
            ctld,
            [
                f"{_stamp(T + H)} update_node: node gpu001 reason set to: faultlens p=0.91",
                f"{_stamp(T + H)} update_node: node gpu001 state set to DRAINED",
                f"{_stamp(T + 2 * H)} update_node: node gpu002 reason set to: faultlens p=0.88",
                f"{_stamp(T + 2 * H)} update_node: node gpu002 state set to DRAINING",
                # a drain before the suggestion does not count as acting on it
                f"{_stamp(T - 5 * H)} update_node: node gpu004 state set to DRAIN",
            ],
        )
        # the data reaches 6 h past the suggestions: nothing is decided yet
        _ingest(
            store,
            kern,
            [
                f"{(T + 3 * H):%Y-%m-%dT%H:%M:%S}+00:00 gpu001 kernel: NVRM: Xid "
                "(PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
                f"{(T + 6 * H):%Y-%m-%dT%H:%M:%S}+00:00 gpu003 kernel: NVRM: Xid "
                "(PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
            ],
        )
        counts = update_drain_outcomes(store, T + 6 * H)
        assert counts == {DrainOutcome.PENDING.value: 4}
        early = store.query("SELECT node, drained_at, failed_at FROM drain_outcomes ORDER BY node")
        # what was seen is recorded already: gpu001 drained at +1 h and failed at +3 h
        assert early.rows()[0] == ("gpu001", T + H, T + 3 * H)
        # the data passes the horizon: every suggestion is decided
        newest = T + timedelta(hours=HORIZON_H) + H
        update_drain_outcomes(store, newest)
        rows = store.query(
            "SELECT node, made_at, action, drained_at, drain_state, drain_file, drain_line, "
            "failed_at, outcome, checked_at FROM drain_outcomes ORDER BY node"
        ).rows()
        assert rows == [
            ("gpu001", T, "drain_now", T + H, "DRAIN", str(ctld), 2, T + 3 * H,
             DrainOutcome.DRAINED_FAILED.value, newest),
            ("gpu002", T, "drain_after_jobs", T + 2 * H, "DRAIN", str(ctld), 4, None,
             DrainOutcome.DRAINED_NO_FAILURE.value, newest),
            ("gpu003", T, "drain_after_jobs", None, None, None, None, T + 6 * H,
             DrainOutcome.NOT_DRAINED_FAILED.value, newest),
            ("gpu004", T, "drain_now", None, None, None, None, None,
             DrainOutcome.NOT_DRAINED_NO_FAILURE.value, newest),
        ]  # fmt: skip
        # a later suggestion, after gpu001's horizon, is a suggestion of its own
        later = T + timedelta(hours=HORIZON_H) + 2 * H
        _predictions(store, later, {"gpu001": "drain_after_jobs"})
        assert update_drain_outcomes(store, later) == {DrainOutcome.PENDING.value: 1}
        # running again with nothing new writes nothing new
        update_drain_outcomes(store, later)
        assert store.count("drain_outcomes") == 5
        summary = drain_summary(store)
    assert summary["suggested"] == 5
    assert summary["by_outcome"] == {
        "pending": 1,
        "drained_failed": 1,
        "drained_no_failure": 1,
        "not_drained_failed": 1,
        "not_drained_no_failure": 1,
    }
    assert summary["drained"] == 2
    assert summary["failure_followed_share"] == 0.5  # 2 of the 4 decided

"""Lemon nodes: repeat failures and the other Meta signals, ranked with evidence."""

from __future__ import annotations

from datetime import timedelta

import polars as pl

from faultlens.models.lemons import lemon_table
from tests.models.synthetic import T0, insert_events

AS_OF = T0 + timedelta(days=40)
# n_lemon: three separate failures in the last 28 days (Xid 79, 48, 95) and a down event;
# n_once: one failure; n_old: two failures, but more than 28 days ago; n_quiet: app Xids only.
FAILS = {
    "n_lemon": [(AS_OF - timedelta(days=d), c) for d, c in ((20, 79), (9, 48), (2, 95))],
    "n_once": [(AS_OF - timedelta(days=5), 79)],
    "n_old": [(AS_OF - timedelta(days=d), 79) for d in (35, 30)],
}
ROWS = [
    {"ts": ts, "node": node, "gpu": "1", "kind": "xid", "code": code, "severity": "critical"}
    for node, fails in FAILS.items()
    for ts, code in fails
]
ROWS += [
    {
        "ts": AS_OF - timedelta(days=2, hours=-1),
        "node": "n_lemon",
        "kind": "node_down",
        "message": "Not responding",
        "severity": "error",
        "source": "slurm",
    }
]
ROWS += [
    {
        "ts": AS_OF - timedelta(hours=h),
        "node": "n_quiet",
        "gpu": "0",
        "kind": "xid",
        "code": 13,
        "severity": "warning",
    }
    for h in (3, 30)
]


def test_lemon_ranking_and_evidence(store) -> None:
    insert_events(store, ROWS)
    table = lemon_table(store, AS_OF)
    by_node = {r["node"]: r for r in table.iter_rows(named=True)}
    assert table["node"][0] == "n_lemon" and table["rank"][0] == 1
    assert by_node["n_lemon"]["failures"] == 3
    assert by_node["n_lemon"]["flagged"] is True
    assert by_node["n_lemon"]["failure_causes"] == "xid48,xid79,xid95"
    assert "3.0 failures" in by_node["n_lemon"]["evidence"]
    assert by_node["n_once"]["failures"] == 1 and by_node["n_once"]["flagged"] is False
    assert "n_old" not in by_node  # both its failures are older than 28 days
    assert by_node["n_quiet"]["xid_count"] == 2 and by_node["n_quiet"]["flagged"] is False
    assert table.filter(pl.col("flagged"))["node"].to_list() == ["n_lemon"]

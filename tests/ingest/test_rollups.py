"""The rollups ingest keeps (``ingest.rollups``) equal the rollups rebuilt from scratch, and what a
GROUP BY over ``events`` written here says, after any sequence of loads.

The loads are those of the incremental-refresh test (events, jobs that link old events, an
inventory that gives old events a GPU index, a learned boot time that dates old events, a file's
rows replaced and compacted); ``refresh`` runs after each, and maintains the rollups.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from faultlens.ingest import rollups
from faultlens.ingest.attribution import refresh
from faultlens.ingest.catalog import load_catalog
from faultlens.ingest.store import Store
from tests.ingest.test_refresh_incremental import Loader, step

# The oracle: the aggregates as plain SQL over events, independent of ingest.rollups.
ORACLE = {
    "rollup_fleet_hour": (
        "SELECT date_trunc('hour', ts), source, kind, code, severity, count(*) "
        "FROM events GROUP BY ALL ORDER BY ALL"
    ),
    "rollup_node_day": (
        "SELECT date_trunc('day', ts), node, source, kind, code, severity, count(*), min(ts), "
        "max(ts) FROM events GROUP BY ALL ORDER BY ALL"
    ),
    "rollup_notable": (
        "SELECT ts, node, gpu, gpu_index, kind, code, job_id, file, line FROM events "
        "WHERE severity IN ('warning', 'error', 'critical') OR kind IN ('xid', 'node_down') "
        "ORDER BY ALL"
    ),
}
KEPT = {
    "rollup_fleet_hour": "SELECT hour, source, kind, code, severity, n FROM rollup_fleet_hour",
    "rollup_node_day": (
        "SELECT day, node, source, kind, code, severity, n, first_ts, last_ts FROM rollup_node_day"
    ),
    "rollup_notable": (
        "SELECT ts, node, gpu, gpu_index, kind, code, job_id, file, line FROM rollup_notable"
    ),
}


def _kept(store: Store) -> dict[str, list[tuple]]:
    return {t: store.query(f"{sql} ORDER BY ALL").rows() for t, sql in KEPT.items()}


def _oracle(store: Store) -> dict[str, list[tuple]]:
    return {t: store.query(sql).rows() for t, sql in ORACLE.items()}


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(steps=st.lists(step, min_size=1, max_size=7))
def test_kept_rollups_equal_a_rebuild_after_any_sequence(steps: list[tuple[str, object]]) -> None:
    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "db.duckdb") as store:
        store.load_xid_catalog(load_catalog())
        loader = Loader()
        for kind, payload in steps:
            loader.apply(store, kind, payload)
            refresh(store)
            kept = _kept(store)
            assert kept == _oracle(store), (kind, payload)
            assert rollups.current(store)
            rollups.maintain(store, full=True)
            assert _kept(store) == kept, (kind, payload)


def test_an_append_is_merged_not_rebuilt(tmp_path: Path) -> None:
    """Events appended after a refresh are added incrementally: counts of a key seen before grow,
    its first / last stamps widen, and the result equals the rebuild."""
    ev = {"node": "gpu01", "minute": 5, "kind": "xid", "code": 79, "pci": "0000:3b:00.0"}
    with Store(tmp_path / "db.duckdb") as store:
        store.load_xid_catalog(load_catalog())
        loader = Loader()
        loader.apply(store, "events", [ev | {"hang_min": 0}] * 3)
        refresh(store)
        loader.apply(store, "events", [ev | {"hang_min": 0, "minute": 20}] * 2)
        assert not rollups.current(store)  # five events, three counted
        done = rollups.maintain(store)
        assert done["mode"] == "incremental" and done["events_added"] == 2
        n, first, last = store.query(
            "SELECT n, first_ts, last_ts FROM rollup_node_day WHERE node = 'gpu01'"
        ).row(0)
        assert n == 5 and first.minute == 5 and last.minute == 20
        assert store.scalar("SELECT count(*) FROM rollup_notable") == 5
        kept = _kept(store)
        rollups.maintain(store, full=True)
        assert _kept(store) == kept == _oracle(store)


def test_replaced_rows_force_a_rebuild(tmp_path: Path) -> None:
    ev = {"node": "gpu01", "minute": 5, "kind": "xid", "code": 79, "pci": "0000:3b:00.0"}
    with Store(tmp_path / "db.duckdb") as store:
        loader = Loader()
        loader.apply(store, "events", [ev | {"hang_min": 0}] * 3)
        rollups.maintain(store)
        store.execute("DELETE FROM events WHERE line = 1")
        assert rollups.why_full(store, rollups._load(store)) is not None
        assert rollups.maintain(store)["mode"] == "full"
        assert _kept(store) == _oracle(store)

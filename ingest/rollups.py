"""Rollup tables kept up to date by ingest, so that no reader aggregates ``events``.

``maintain(store)`` runs after every refresh (``ingest.attribution.refresh``, so after every
``faultlens ingest`` and ``run``), and then publishes for readers (``ingest.publish``) when they
asked for it. It adds to the rollups (declared in ``ingest.schema``:
``rollup_fleet_hour``, ``rollup_node_day``, ``rollup_notable``) only the events above its
watermark, the highest ``events`` rowid it had seen, kept in ``rollup_state``:

- the new events are grouped and merged into the count tables (a key seen before gets its count
  added and its first / last stamp widened, a new key is inserted);
- the new notable events are copied, and the copied rows still without a job or a GPU index take
  the ones refresh gave their event since.

A rowid is a position, not an identity (``ingest.watermarks``): the watermark is trusted only while
the rows at or below it are the ones seen, i.e. their count, the number still without a time and
without a node (a learned boot time or rank map fills them in place), and the identity of the row
at the mark are unchanged. Otherwise, or with ``full``, the rollups are rebuilt from ``events``.
Both ways give the same tables (``tests/ingest/test_rollups.py``).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from faultlens.ingest import publish
from faultlens.ingest.errors import StoreError
from faultlens.ingest.schema import ROLLUP_TABLES, ROLLUP_VIEWS, Kind, Severity
from faultlens.ingest.store import Store

log = logging.getLogger(__name__)

OUT_KINDS: tuple[str, ...] = (
    Kind.NODE_DOWN.value,
    Kind.NODE_DRAIN.value,
    Kind.NODE_NOT_RESPONDING.value,
    Kind.NODE_RESUME.value,
)
NOTABLE_SEVERITIES: tuple[str, ...] = (
    Severity.WARNING.value,
    Severity.ERROR.value,
    Severity.CRITICAL.value,
)
# Kinds copied whatever their severity: every kind a failure event (models.target) can have.
HARDWARE_KINDS: tuple[str, ...] = (
    Kind.XID.value,
    Kind.SXID.value,
    Kind.NVLINK.value,
    Kind.FALLEN_OFF_BUS.value,
    Kind.GPU_INIT_FAIL.value,
    Kind.RESET_REQUIRED.value,
    Kind.ECC.value,
    Kind.ROW_REMAP.value,
    Kind.KERNEL_PANIC.value,
)
NO_MARK = -1
_RELINKED = ("events", "rollup_notable")  # the tables a relink updates in place
_MERGED = ("rollup_node_day",)  # the tables new events update in place (counts merged)
_IDENTITY = "file, line, ts, node, gpu, source, kind, code"  # columns refresh never changes

_KEYS = {
    "rollup_fleet_hour": ("hour", "source", "kind", "code", "severity"),
    "rollup_node_day": ("day", "node", "source", "kind", "code", "severity"),
}
_NEW_ROWS = (  # the events above the watermark, read once (a rowid range: a few row groups)
    "CREATE OR REPLACE TEMP TABLE _rollup_new AS SELECT rowid AS event_rowid, ts, node, gpu, "
    "gpu_index, source, kind, subkind, code, severity, job_id, message, attrs, file, line "
    "FROM events WHERE rowid > ?"
)
_GROUPED = {
    "rollup_fleet_hour": (
        "SELECT date_trunc('hour', ts) AS hour, source, kind, code, severity, count(*) AS n "
        "FROM _rollup_new GROUP BY ALL"
    ),
    "rollup_node_day": (
        "SELECT date_trunc('day', ts) AS day, node, source, kind, code, severity, count(*) AS n, "
        "min(ts) AS first_ts, max(ts) AS last_ts FROM _rollup_new GROUP BY ALL"
    ),
}
_NOTABLE = (
    "SELECT * FROM _rollup_new WHERE severity IN (SELECT unnest(?::VARCHAR[])) "
    "OR kind IN (SELECT unnest(?::VARCHAR[]))"
)
_ORDER = {
    "rollup_fleet_hour": "hour",
    "rollup_node_day": "node, day",
    "rollup_notable": "node, ts",
}


def ensure(store: Store) -> None:
    """Create the rollup tables and views where missing (an older database gains them)."""
    for table in ROLLUP_TABLES.values():
        store.execute(table.ddl())
    for ddl in ROLLUP_VIEWS.values():
        store.execute(ddl)


def _scan(store: Store, mark: int) -> dict[str, int]:
    """The events at or below ``mark`` (count, undated, node-less: the check, one pass over the
    old rows) and above it (a rowid range: a few row groups); together, the next watermark."""
    sql = (
        "SELECT count(*), count(*) FILTER (ts IS NULL), count(*) FILTER (node IS NULL), "
        "max(rowid) FROM events WHERE rowid {} ?"
    )
    below = store.query(sql.format("<="), [mark]).row(0)
    above = store.query(sql.format(">"), [mark]).row(0)
    top = above[3] if above[3] is not None else below[3]
    return {
        "n_below": int(below[0]),
        "untimed_below": int(below[1]),
        "nodeless_below": int(below[2]),
        "n": int(below[0]) + int(above[0]),
        "untimed": int(below[1]) + int(above[1]),
        "nodeless": int(below[2]) + int(above[2]),
        "top": NO_MARK if top is None else int(top),
    }


def _mark_of(store: Store, scan: dict[str, int]) -> list[Any]:
    """The ``rollup_state`` row for the table as ``scan`` saw it."""
    mark = json.dumps({"nodeless": scan["nodeless"], "row": _identity(store, scan["top"])})
    return [scan["top"], scan["n"], scan["untimed"], mark]


def _identity(store: Store, rowid: int) -> str:
    if rowid == NO_MARK:
        return ""
    rows = store.query(f"SELECT {_IDENTITY} FROM events WHERE rowid = ?", [rowid])
    return json.dumps(rows.rows(), default=str)


def _load(store: Store) -> dict[str, Any] | None:
    frame = store.query(
        "SELECT max_rowid, n_rows, untimed, mark FROM rollup_state WHERE tbl = 'events'"
    )
    if not frame.height:
        return None
    return frame.row(0, named=True)


def why_full(
    store: Store, prior: dict[str, Any] | None, scan: dict[str, int] | None = None
) -> str | None:
    """Why the events at or below the rollups' watermark may not be the ones they counted."""
    if prior is None:
        return "no rollup watermark yet"
    mark = prior["max_rowid"]
    scan = scan or _scan(store, mark)
    seen = json.loads(prior["mark"] or "{}")
    if scan["n_below"] != prior["n_rows"]:
        return f"{prior['n_rows'] - scan['n_below']} events at or below the watermark changed"
    if scan["untimed_below"] != prior["untimed"] or scan["nodeless_below"] != seen.get("nodeless"):
        return "old events were given a time or a node"
    if _identity(store, mark) != seen.get("row", ""):
        return "the events were renumbered or replaced"
    return None


def maintain(store: Store, *, full: bool = False, relinked: bool = True) -> dict[str, Any]:
    """Bring the rollups up to date with ``events`` (in one transaction); returns what it did.

    ``relinked``: whether refresh may have given old events a job or a GPU index (the copied
    rows then follow; ``False`` skips that join)."""
    t0 = time.perf_counter()
    with store.transaction():
        ensure(store)
        prior = _load(store)
        before = _scan(store, prior["max_rowid"] if prior else NO_MARK)
        reason = "requested" if full else why_full(store, prior, before)
        above = NO_MARK if reason else int(prior["max_rowid"])  # type: ignore[index]
        if reason:
            log.info("rollups rebuilt: %s", reason)
            for name in ("rollup_fleet_hour", "rollup_node_day", "rollup_notable"):
                store.execute(f"DELETE FROM {name}")
        added = _add_above(store, above, merge=not reason)
        if not reason and relinked:
            _follow_refresh(store)
        if publish.enabled(store):  # readers' parts follow the updates in place
            changed = (*(_RELINKED if relinked else ()), *(_MERGED if added else ()))
            if reason or changed:
                publish.mark_changed(store, tuple(publish.APPEND) if reason else changed)
        store.execute("DELETE FROM rollup_state WHERE tbl = 'events'")
        store.execute(
            "INSERT INTO rollup_state VALUES ('events', ?, ?, ?, ?)", _mark_of(store, before)
        )
    done = {
        "mode": "full" if reason else "incremental",
        "reason": reason or "",
        "events_added": added,
        "seconds": round(time.perf_counter() - t0, 3),
    }
    publish.now(store)  # readers see the refreshed tables now, not when the writer closes
    return done


def _add_above(store: Store, above: int, *, merge: bool) -> int:
    """Add the events with ``rowid > above``; ``merge``: into rows already there."""
    store.execute(_NEW_ROWS, [above])
    try:
        added = int(store.scalar("SELECT count(*) FROM _rollup_new") or 0)
        if added:
            for name, grouped in _GROUPED.items():
                if merge:
                    _merge(store, name, grouped)
                else:  # a rebuild: stored in the order one-node queries read
                    store.execute(f"INSERT INTO {name} {grouped} ORDER BY {_ORDER[name]}")
            store.execute(
                f"INSERT INTO rollup_notable {_NOTABLE} ORDER BY node, ts",
                [list(NOTABLE_SEVERITIES), [*OUT_KINDS, *HARDWARE_KINDS]],
            )
    finally:
        store.execute("DROP TABLE IF EXISTS _rollup_new")
    return added


def _merge(store: Store, name: str, grouped: str) -> None:
    """A key seen before gets its count added (and its first / last stamp widened); a new key is
    inserted."""
    on = " AND ".join(f"r.{k} IS NOT DISTINCT FROM d.{k}" for k in _KEYS[name])
    widen = (
        ", first_ts = least(r.first_ts, d.first_ts), last_ts = greatest(r.last_ts, d.last_ts)"
        if name == "rollup_node_day"
        else ""
    )
    store.execute(
        f"MERGE INTO {name} r USING ({grouped}) d ON {on} "
        f"WHEN MATCHED THEN UPDATE SET n = r.n + d.n{widen} "
        "WHEN NOT MATCHED THEN INSERT BY NAME"
    )


def _follow_refresh(store: Store) -> None:
    """Copied rows still without a job or GPU index take what refresh has given their event."""
    store.execute(
        "UPDATE rollup_notable SET job_id = e.job_id, gpu_index = e.gpu_index "
        "FROM (SELECT rowid AS rid, job_id, gpu_index FROM events "
        "      WHERE job_id IS NOT NULL OR gpu_index IS NOT NULL) e "
        "WHERE e.rid = rollup_notable.event_rowid "
        "AND (rollup_notable.job_id IS NULL OR rollup_notable.gpu_index IS NULL) "
        "AND (e.job_id IS DISTINCT FROM rollup_notable.job_id "
        "     OR e.gpu_index IS DISTINCT FROM rollup_notable.gpu_index)"
    )


def current(store: Store) -> bool:
    """Whether the rollups in ``store`` count exactly its events (the writer's full check)."""
    try:
        prior = _load(store)
    except StoreError:  # an older database without rollup tables
        return False
    if prior is None:
        return False
    scan = _scan(store, prior["max_rowid"])
    return scan["top"] == prior["max_rowid"] and why_full(store, prior, scan) is None

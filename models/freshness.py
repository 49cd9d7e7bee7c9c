"""How fresh the data is: the newest line per node and source, and sources that went quiet.

A prediction is only as current as its inputs. ``predict`` and ``run`` default their ``as_of`` to
``newest_data`` (never the wall clock: on a database whose logs ended months ago a wall-clock
prediction sees an empty window and reports a healthy fleet), and ``quiet_sources`` turns a log
pipeline that stopped into an alert of its own ("logs stopped").

Sources are the ``events.source`` values (kernel, slurm, nccl, ...) plus ``telemetry`` for the
``telemetry`` table. Events are only the meaningful lines, so a quiet kernel log on one node is
normal; per node, only the sources in ``per_node_sources`` (periodic ones: telemetry) raise an
alert, while any source raises one when it went quiet on the whole fleet.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta

import polars as pl

from faultlens.ingest.store import Store

log = logging.getLogger(__name__)

TELEMETRY_SOURCE = "telemetry"
PER_NODE_SOURCES = (TELEMETRY_SOURCE,)
_SCHEMA = {"node": pl.String, "source": pl.String, "last_seen": pl.Datetime("us")}


_FULL_SQL = (
    "SELECT node, source, max(ts) AS last_seen FROM events "
    "WHERE ts IS NOT NULL AND node IS NOT NULL {where} GROUP BY ALL "
    "UNION ALL "
    "SELECT node, ? AS source, max(ts) AS last_seen FROM telemetry "
    "WHERE ts IS NOT NULL AND node IS NOT NULL {where} GROUP BY ALL"
)
# The appended tables the rollup reads, and the columns that identify the row at a mark.
_MARKED = {"events": "file, line, ts, node, source", "telemetry": "ts, node, gpu, metric, value"}


def _current_marks(store: Store) -> dict[str, tuple[int, int, int, str]]:
    """Per table: (max rowid, rows, events without time, identity of the row at the mark)."""
    out = {}
    for table, cols in _MARKED.items():
        n_rows, top = store.query(f"SELECT count(*), max(rowid) FROM {table}").row(0)
        top = -1 if top is None else int(top)
        untimed = 0
        if table == "events":
            untimed = int(store.scalar("SELECT count(*) FROM events WHERE ts IS NULL") or 0)
        ident = store.query(f"SELECT {cols} FROM {table} WHERE rowid = ?", [top]).rows()
        out[table] = (top, int(n_rows), untimed, json.dumps(ident, default=str))
    return out


def _marks_hold(store: Store, marks: dict[str, tuple[int, int, int, str]]) -> bool:
    """The rows at or below the stored marks are the ones the rollup saw: same count, same row
    at the mark, no old event given a time since (rows are only appended above the marks)."""
    if set(marks) != set(_MARKED):
        return False
    for table, cols in _MARKED.items():
        top, n_rows, untimed, ident = marks[table]
        kept = store.scalar(f"SELECT count(*) FROM {table} WHERE rowid <= ?", [top])
        if int(kept or 0) != n_rows:
            return False
        now = store.query(f"SELECT {cols} FROM {table} WHERE rowid = ?", [top]).rows()
        if json.dumps(now, default=str) != ident:
            return False
        if table == "events":
            old_untimed = store.scalar(
                "SELECT count(*) FROM events WHERE rowid <= ? AND ts IS NULL", [top]
            )
            if int(old_untimed or 0) != untimed:
                return False
    return True


def _tidy(frame: pl.DataFrame) -> pl.DataFrame:
    if frame.height == 0:
        return pl.DataFrame(schema=_SCHEMA)
    return (
        frame.with_columns(pl.col("last_seen").cast(pl.Datetime("us")))
        .group_by("node", "source")
        .agg(pl.col("last_seen").max())
        .sort("node", "source")
    )


def _has_rollup(store: Store) -> bool:
    n = store.scalar(
        "SELECT count(*) FROM duckdb_tables() WHERE table_name IN "
        "('source_last_seen', 'source_last_seen_marks')"
    )
    return int(n or 0) == 2


def source_last_seen_full(store: Store) -> pl.DataFrame:
    """``source_last_seen`` from every row (the baseline the rollup is checked against)."""
    return _tidy(store.query(_FULL_SQL.format(where=""), [TELEMETRY_SOURCE]))


def source_last_seen(store: Store) -> pl.DataFrame:
    """node, source, last_seen (the newest row's time) for every node and source.

    Read from the ``source_last_seen`` rollup plus the rows appended since its marks, so the
    cost follows what is new, not the length of the history; when the marks no longer hold (a
    reparse deleted rows, a checkpoint renumbered them, old events were given a time) it is
    rebuilt from every row. A writable store saves the result for the next call."""
    if not _has_rollup(store):  # a database made before the rollup, opened read-only
        return source_last_seen_full(store)
    stored = store.query("SELECT tbl, max_rowid, n_rows, untimed, mark FROM source_last_seen_marks")
    marks = {r[0]: (int(r[1]), int(r[2]), int(r[3] or 0), r[4] or "") for r in stored.rows()}
    if marks and _marks_hold(store, marks):
        ev, tel = marks["events"][0], marks["telemetry"][0]
        new = store.query(
            _FULL_SQL.format(where="AND rowid > ?"),
            [ev, TELEMETRY_SOURCE, tel],
        )
        if new.height == 0 and marks == _current_marks(store):
            return _tidy(store.query("SELECT node, source, last_seen FROM source_last_seen"))
        old = store.query("SELECT node, source, last_seen FROM source_last_seen")
        frame = _tidy(pl.concat([old, new], how="vertical_relaxed"))
    else:
        log.info("source_last_seen: rebuilding the rollup from every row")
        frame = source_last_seen_full(store)
    if not store.read_only:
        _save(store, frame)
    return frame


def _save(store: Store, frame: pl.DataFrame) -> None:
    current = _current_marks(store)
    with store.transaction():
        store.execute("DELETE FROM source_last_seen")
        store.insert("source_last_seen", frame)
        store.execute("DELETE FROM source_last_seen_marks")
        store.insert(
            "source_last_seen_marks",
            pl.DataFrame(
                [
                    {"tbl": t, "max_rowid": m[0], "n_rows": m[1], "untimed": m[2], "mark": m[3]}
                    for t, m in current.items()
                ]
            ),
        )


def newest_data(store: Store) -> datetime | None:
    """The newest timestamp in ``events`` or ``telemetry`` (None on an empty database)."""
    row = store.query(
        "SELECT max(ts) FROM (SELECT max(ts) AS ts FROM events UNION ALL "
        "SELECT max(ts) AS ts FROM telemetry)"
    ).row(0)
    return row[0]


def default_as_of(store: Store) -> datetime | None:
    """``as_of`` of a prediction when none is given: just after the newest data (whole second)."""
    newest = newest_data(store)
    if newest is None:
        return None
    return newest.replace(microsecond=0) + timedelta(seconds=1)


def with_age(last_seen: pl.DataFrame, now: datetime) -> pl.DataFrame:
    """``last_seen`` with ``age_h``: hours between the newest row and ``now``."""
    return last_seen.with_columns(
        ((pl.lit(now) - pl.col("last_seen")).dt.total_seconds() / 3600.0).round(2).alias("age_h")
    )


def quiet_sources(
    last_seen: pl.DataFrame,
    *,
    now: datetime,
    quiet_h: float,
    per_node_sources: tuple[str, ...] = PER_NODE_SOURCES,
) -> list[dict[str, object]]:
    """ "Logs stopped" findings: ``{"node", "source", "last_seen", "age_h"}`` for a source whose
    newest row anywhere is older than ``quiet_h`` before ``now`` (``node`` None: the whole
    source), and for a node whose ``per_node_sources`` row is that old while the rest of the
    fleet still reports the source."""
    if last_seen.height == 0:
        return []
    aged = with_age(last_seen, now)
    limit = quiet_h
    fleet = aged.group_by("source").agg(pl.col("last_seen").max(), pl.col("age_h").min())
    out: list[dict[str, object]] = []
    dead = set()
    for r in fleet.filter(pl.col("age_h") > limit).sort("source").iter_rows(named=True):
        dead.add(r["source"])
        out.append({"node": None, **r})
    nodes = aged.filter(
        pl.col("source").is_in(list(per_node_sources))
        & ~pl.col("source").is_in(list(dead))
        & (pl.col("age_h") > limit)
    ).sort("node", "source")
    out += nodes.select("node", "source", "last_seen", "age_h").to_dicts()
    return out


def freshness_doc(last_seen: pl.DataFrame, now: datetime) -> dict[str, object]:
    """For ``faultlens status``: per source (nodes, newest and stalest node's newest row, ages
    in hours from ``now``) and per node and source (``last_seen``, ``age_h``)."""
    if last_seen.height == 0:
        return {"by_source": [], "by_node": []}
    aged = with_age(last_seen, now)
    by_source = (
        aged.group_by("source")
        .agg(
            pl.len().alias("nodes"),
            pl.col("last_seen").max().alias("newest"),
            pl.col("age_h").min().alias("newest_age_h"),
            pl.col("last_seen").min().alias("stalest"),
            pl.col("age_h").max().alias("stalest_age_h"),
        )
        .sort("source")
    )

    def iso(frame: pl.DataFrame) -> list[dict[str, object]]:
        return frame.with_columns(pl.col(pl.Datetime).dt.to_string("%Y-%m-%dT%H:%M:%S")).to_dicts()

    return {"by_source": iso(by_source), "by_node": iso(aged.sort("age_h", descending=True))}

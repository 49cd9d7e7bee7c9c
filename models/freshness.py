"""How fresh the data is: the newest line per node and source, and sources that went quiet.

A prediction is only as current as its inputs. ``predict`` and ``run`` default their ``as_of`` to
``newest_data`` (never the wall clock: on a database whose logs ended months ago a wall-clock
prediction sees an empty window and reports a healthy fleet), and ``quiet_sources`` turns a log
pipeline that stopped into an alert of its own ("logs stopped").

Sources are the ``events.source`` values (kernel, slurm, nccl, ...) plus ``telemetry`` for the
``telemetry`` table. Events are only the meaningful lines, so a quiet kernel log on one node is
normal; per node, only the sources in ``per_node_sources`` (periodic ones: telemetry) raise an
alert, while any source raises one when it went quiet on the whole fleet.

Both are read from ``event_summary``, the per-file summary that ``load()`` keeps beside the rows
it writes (``ingest.store``): its size follows the files and nodes, not the history's length, and
it is the one record of "newest row" that ``status``, ``run`` and the textfile share.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

import polars as pl

from faultlens.ingest.schema import TELEMETRY_SOURCE
from faultlens.ingest.store import SUMMARY_FROM_TABLES, Store

log = logging.getLogger(__name__)

PER_NODE_SOURCES = (TELEMETRY_SOURCE,)
_SCHEMA = {"node": pl.String, "source": pl.String, "last_seen": pl.Datetime("us")}


def source_last_seen(store: Store, summary: str | None = None) -> pl.DataFrame:
    """node, source, last_seen (the newest row's time) for every node and source, from
    ``event_summary`` (``summary``: another source of its rows, e.g. ``SUMMARY_FROM_TABLES``).
    Rows without a node or a time are never a last-seen."""
    src = summary or store.summary_source()
    rows = store.records(
        f"SELECT node, source, max(last_ts) AS last_seen FROM {src} "
        "WHERE node IS NOT NULL AND last_ts IS NOT NULL GROUP BY ALL ORDER BY node, source"
    )
    return pl.DataFrame(rows, schema=_SCHEMA)  # from dicts: no Arrow import


def source_last_seen_full(store: Store) -> pl.DataFrame:
    """``source_last_seen`` from every row of ``events`` and ``telemetry`` (the reference)."""
    return source_last_seen(store, SUMMARY_FROM_TABLES)


def newest_data(store: Store) -> datetime | None:
    """The newest timestamp in ``events`` or ``telemetry`` (None on an empty database), from
    ``event_summary``."""
    rows = store.records(f"SELECT max(last_ts) AS ts FROM {store.summary_source()}")
    return rows[0]["ts"] if rows else None


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

"""The rollup tables as readers use them: which one answers a query exactly, and its WHERE.

The rollups are kept by ingest in the database itself (``ingest.rollups``: declared in
``ingest.schema``, brought up to date after every refresh from the events above a watermark):

- ``rollup_fleet_hour``: events per hour x source x kind x code x severity (the event explorer's
  facets, timeline and count when no node, GPU, job or text filter is set);
- ``rollup_node_day``: events per day x node x source x kind x code x severity, with the first and
  last timestamp (node and cluster filters, the node summary, top Xids);
- ``rollup_notable``: warning-or-worse, out-of-service (down, drain, resume) and GPU hardware
  events (the node page's tables and timeline, the fleet state, the incidents);
- ``rollup_info`` (a view): the data range and the node list.

A reader's private snapshot copy (``reports.snapshot``) is opened read-only and used as it is when
``ready(store)`` says its rollups count all its events (the cheap check: the rollups' watermark is
the copy's last event and no event was deleted; the writer's own check, ``ingest.rollups.why_full``,
also catches rows changed in place, and rebuilds). Otherwise, e.g. a copy taken between an ingest
and its refresh, or a database written without the ingest hook, ``prepare(store)`` brings the
copy's rollups up to date, incrementally when it can, before it is opened read-only. Failure
events (``models.target``) are read from ``rollup_notable`` on a snapshot
(``SnapshotStore.notable_table``).

A query function uses a rollup only when it gives the same answer as the raw table: the filter's
time bounds fall on the rollup's grain, and no filter needs a column the rollup does not keep.
Otherwise it reads ``events`` (the paginated table and free-text search always do).
"""

from __future__ import annotations

import logging
import time
from datetime import datetime
from typing import Any

from faultlens.ingest import rollups as kept
from faultlens.ingest.errors import StoreError
from faultlens.ingest.store import Store
from faultlens.reports.filters import Filters, facet_where

log = logging.getLogger(__name__)

OUT_KINDS = kept.OUT_KINDS
NOTABLE_SEVERITIES = kept.NOTABLE_SEVERITIES
TABLES = ("rollup_fleet_hour", "rollup_node_day", "rollup_notable")


def ready(store: Store) -> bool:
    """Whether the rollups of ``store`` count all its events (read from the tables' metadata and
    the watermark's row: no scan of ``events``)."""
    try:
        mark = store.query("SELECT max_rowid, n_rows FROM rollup_state WHERE tbl = 'events'")
    except StoreError:  # a database from before the rollups: no rollup_state table
        return False
    if not mark.height:
        return False
    top, n = store.query("SELECT max(rowid), count(*) FROM events").row(0)
    return (kept.NO_MARK if top is None else int(top), int(n)) == tuple(mark.row(0))


def prepare(store: Store) -> dict[str, Any]:
    """Bring the rollups of ``store`` (a read-write snapshot copy) up to date; returns timings."""
    t0 = time.perf_counter()
    done = kept.maintain(store)
    log.info("rollups of the snapshot brought up to date: %s", done)
    return {"seconds": round(time.perf_counter() - t0, 2), "maintained": done["mode"]}


def available(store: Store) -> bool:
    """Whether ``store`` is a snapshot whose rollups were built."""
    return bool(getattr(store, "rollups", False))


def _aligned(t: datetime | None, grain: str) -> bool:
    if t is None:
        return True
    if grain == "hour":
        return t.minute == 0 and t.second == 0 and t.microsecond == 0
    return t.hour == 0 and t.minute == 0 and t.second == 0 and t.microsecond == 0


def grain_for(
    store: Store,
    f: Filters,
    *,
    bucket: str | None = None,
    search: str | None = None,
    per_node: bool = False,
) -> str | None:
    """Which rollup answers a count with these filters exactly: "fleet", "node" or None (raw).

    ``bucket`` is the time bucket the answer is grouped by (``None``: not grouped by time);
    ``per_node``: the answer needs the node column (distinct nodes, one node's counts)."""
    if not available(store) or search or f.gpu or f.job_id:
        return None
    if (
        not f.nodes
        and not per_node
        and _aligned(f.since, "hour")
        and _aligned(f.until, "hour")
        and bucket in (None, "1 hour", "6 hours", "1 day", "7 days")
    ):
        return "fleet"
    if (
        _aligned(f.since, "day")
        and _aligned(f.until, "day")
        and bucket in (None, "1 day", "7 days")
    ):
        return "node"
    return None


def where(f: Filters, grain: str, facets: dict[str, Any] | None = None) -> tuple[str, list[Any]]:
    """A WHERE body over the rollup of ``grain`` for the filters and facets, and its params."""
    col = "hour" if grain == "fleet" else "day"
    parts, params = f.time_where(col)
    if grain == "node" and f.nodes:
        parts.append("node IN (SELECT unnest(?::VARCHAR[]))")
        params.append(list(f.nodes))
    facet_parts, facet_params = facet_where(facets)
    parts += facet_parts
    params += facet_params
    return (" AND ".join(parts) if parts else "TRUE"), params


def table(grain: str) -> tuple[str, str]:
    """(table, time column) of the rollup of ``grain``."""
    return ("rollup_fleet_hour", "hour") if grain == "fleet" else ("rollup_node_day", "day")

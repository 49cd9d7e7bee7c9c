"""Small aggregate tables built once per snapshot, so the dashboard's counts never scan ``events``.

``build(store)`` runs on the private snapshot copy (``reports.snapshot``) right after it is taken,
before it is opened read-only. Two GROUP BY passes over ``events`` give

- ``rollup_fleet_hour``: events per hour x source x kind x code x severity (the event explorer's
  facets, timeline and count when no node, GPU, job or text filter is set);
- ``rollup_node_day``: events per day x node x source x kind x code x severity, with the first and
  last timestamp (node and cluster filters, the node summary, top Xids), stored in node order so a
  one-node query reads a few row groups;

and small copies of the rows the detail views list:

- ``rollup_notable``: warning-or-worse events and the node out-of-service events (down, drain,
  resume), in node and time order (the node page's tables and timeline);
- ``rollup_target_events``: ``models.target.target_events`` over the whole history (failure
  episodes of any range are computed from it);
- ``rollup_info``: the data range and the node list.

A query function uses a rollup only when it gives the same answer as the raw table: the filter's
time bounds fall on the rollup's grain, and no filter needs a column the rollup does not keep.
Otherwise it reads ``events`` (the paginated table and free-text search always do).
"""

from __future__ import annotations

import logging
import time
from datetime import datetime
from typing import Any

from faultlens.ingest.store import Store
from faultlens.reports.filters import Filters, facet_where

log = logging.getLogger(__name__)

OUT_KINDS = ("node_down", "node_drain", "node_not_responding", "node_resume")
NOTABLE_SEVERITIES = ("warning", "error", "critical")
TABLES = (
    "rollup_fleet_hour",
    "rollup_node_day",
    "rollup_notable",
    "rollup_target_events",
    "rollup_info",
)
_EPOCH, _END = datetime(1970, 1, 1), datetime(9999, 1, 1)

_FLEET_HOUR = """
CREATE TABLE rollup_fleet_hour AS
SELECT date_trunc('hour', ts) AS hour, source, kind, code, severity, count(*) AS n
FROM events GROUP BY ALL ORDER BY hour
"""
_NODE_DAY = """
CREATE TABLE rollup_node_day AS
SELECT date_trunc('day', ts) AS day, node, source, kind, code, severity, count(*) AS n,
       min(ts) AS first_ts, max(ts) AS last_ts
FROM events GROUP BY ALL ORDER BY node, day
"""


def build(store: Store) -> dict[str, Any]:
    """Create the rollup tables in ``store`` (a read-write snapshot copy); returns timings."""
    t0 = time.perf_counter()
    for name in TABLES:
        store.execute(f"DROP TABLE IF EXISTS {name}")
    store.execute(_FLEET_HOUR)  # two plain GROUP BYs: faster here than one GROUPING SETS pass
    store.execute(_NODE_DAY)
    t_grouped = time.perf_counter() - t0
    store.execute(
        "CREATE TABLE rollup_notable AS SELECT ts, node, gpu, gpu_index, source, kind, code, "
        "severity, job_id, message, file, line FROM events "
        "WHERE severity IN (SELECT unnest(?::VARCHAR[])) OR kind IN (SELECT unnest(?::VARCHAR[])) "
        "ORDER BY node, ts",
        [list(NOTABLE_SEVERITIES), list(OUT_KINDS)],
    )
    t_notable = time.perf_counter() - t0 - t_grouped
    from faultlens.models.target import target_events

    targets = target_events(store, _EPOCH, _END)
    store.con.register("_rollup_targets", targets.to_arrow())
    try:
        store.execute("CREATE TABLE rollup_target_events AS SELECT * FROM _rollup_targets")
    finally:
        store.con.unregister("_rollup_targets")
    store.execute(
        "CREATE TABLE rollup_info AS SELECT "
        "(SELECT min(lo) FROM (SELECT min(first_ts) AS lo FROM rollup_node_day "
        " UNION ALL SELECT min(start) FROM jobs)) AS lo, "
        "(SELECT max(hi) FROM (SELECT max(last_ts) AS hi FROM rollup_node_day "
        ' UNION ALL SELECT max("end") FROM jobs)) AS hi, '
        "(SELECT list(DISTINCT node ORDER BY node) FROM (SELECT DISTINCT node FROM "
        "rollup_node_day UNION ALL SELECT node FROM gpus UNION ALL SELECT unnest(nodes) FROM jobs)"
        " WHERE node IS NOT NULL) AS nodes"
    )
    total = time.perf_counter() - t0
    sizes = {t: int(store.scalar(f"SELECT count(*) FROM {t}")) for t in TABLES}
    log.info(
        "rollups built in %.1f s (grouping %.1f s, notable %.1f s): %s",
        total,
        t_grouped,
        t_notable,
        sizes,
    )
    return {
        "seconds": round(total, 2),
        "grouping_s": round(t_grouped, 2),
        "notable_s": round(t_notable, 2),
        "rows": sizes,
    }


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

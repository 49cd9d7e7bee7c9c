"""Fleet-level queries: overview numbers, the event explorer, data health.

Every function aggregates in DuckDB and returns a small polars frame (or a page of rows): nothing
here pulls the events table into Python. ``f`` is the shared ``Filters``.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import polars as pl

from faultlens.ingest.store import Store
from faultlens.models.target import failure_episodes
from faultlens.reports import rollups
from faultlens.reports.filters import Filters, bucket_for, facet_where

# Failure causes of models.target, grouped into the components an SRE counts MTBF for.
COMPONENT_OF_CAUSE: dict[str, str] = {
    "xid48": "GPU memory",
    "xid64": "GPU memory",
    "xid94": "GPU memory",
    "xid95": "GPU memory",
    "xid140": "GPU memory",
    "ecc": "GPU memory",
    "row_remap": "GPU memory",
    "attributed:gpu_memory": "GPU memory",
    "xid79": "GPU",
    "fallen_off_bus": "GPU",
    "gpu_init_fail": "GPU",
    "attributed:gpu_hardware": "GPU",
    "node_down": "host",
    "attributed:host": "host",
}
EVENT_COLUMNS = (
    "ts",
    "node",
    "gpu",
    "source",
    "kind",
    "code",
    "severity",
    "job_id",
    "message",
    "file",
    "line",
)


def data_range(store: Store) -> tuple[datetime | None, datetime | None]:
    """First and last timestamp of events and jobs (the dashboard's default time range)."""
    if rollups.available(store):
        row = store.query("SELECT lo, hi FROM rollup_info").row(0, named=True)
        return row["lo"], row["hi"]
    row = store.query(
        "SELECT min(lo) AS lo, max(hi) AS hi FROM ("
        "SELECT min(ts) AS lo, max(ts) AS hi FROM events "
        'UNION ALL SELECT min(start), max("end") FROM jobs)'
    ).row(0, named=True)
    return row["lo"], row["hi"]


def node_list(store: Store) -> list[str]:
    if rollups.available(store):
        return list(store.scalar("SELECT nodes FROM rollup_info") or [])
    frame = store.query(
        "SELECT DISTINCT node FROM (SELECT DISTINCT node FROM events UNION ALL "
        "SELECT node FROM gpus UNION ALL SELECT unnest(nodes) FROM jobs) "
        "WHERE node IS NOT NULL ORDER BY node"
    )
    return frame["node"].to_list()


def table_counts(store: Store) -> dict[str, int]:
    names = (
        "events",
        "jobs",
        "telemetry",
        "quarantine",
        "ingested_files",
        "predictions",
        "attributions",
    )
    sql = " UNION ALL ".join(f"SELECT '{n}' AS t, count(*) AS n FROM {n}" for n in names)
    counts = {r["t"]: int(r["n"]) for r in store.query(sql).iter_rows(named=True)}
    return {n: counts[n] for n in names}  # in this order: a UNION ALL's rows come in any order


# -- overview --------------------------------------------------------------------------------------
def episodes_in(store: Store, since: datetime | None, until: datetime | None) -> pl.DataFrame:
    """Hardware failure episodes (models.target) of the whole fleet in the time range."""
    lo, hi = since or datetime(1970, 1, 1), until or datetime(9999, 1, 1)
    ep = failure_episodes(store, lo, hi)  # on a snapshot, from its rollup_notable
    return ep.with_columns(
        pl.col("cause").replace_strict(COMPONENT_OF_CAUSE, default="other").alias("component")
    )


def select_episodes(episodes: pl.DataFrame, f: Filters) -> pl.DataFrame:
    """The episodes on the selected nodes / GPU (a small frame: filtered in polars)."""
    if f.nodes:
        episodes = episodes.filter(pl.col("node").is_in(list(f.nodes)))
    if f.gpu and f.gpu.isdigit():
        episodes = episodes.filter(pl.col("gpu") == f.gpu)
    return episodes


def failures(store: Store, f: Filters) -> pl.DataFrame:
    """Hardware failure episodes in the range, on the selected nodes."""
    return select_episodes(episodes_in(store, f.since, f.until), f)


def failure_trend(episodes: pl.DataFrame, f: Filters, n_nodes: int) -> pl.DataFrame:
    """Failures per 1000 node-days per period (day or week) of the range: ``episodes`` are the
    failures of ``models.reliability.failures`` (the one definition) and ``n_nodes`` the fleet
    model's nodes, so the periods add up to the headline rate."""
    every = "1w" if (f.span_days or 0) > 60 else "1d"
    days = 7.0 if every == "1w" else 1.0
    counts = (
        episodes.sort("ts")
        .group_by_dynamic("ts", every=every)
        .agg(pl.len().alias("failures"))
        .rename({"ts": "period"})
        if episodes.height
        else pl.DataFrame(schema={"period": pl.Datetime("us"), "failures": pl.UInt32})
    )
    lo = f.since or (episodes["ts"].min() if episodes.height else None)
    hi = f.until or (episodes["ts"].max() if episodes.height else None)
    if lo is not None and hi is not None and hi > lo:
        periods = pl.datetime_range(lo, hi, every, closed="left", eager=True, time_unit="us")
        grid = (
            pl.DataFrame({"period": periods})
            .with_columns(pl.col("period").dt.truncate(every))
            .unique("period", keep="first")
        )
        counts = grid.join(counts, on="period", how="left").sort("period")
    return counts.with_columns(
        pl.col("failures").fill_null(0),
        (pl.col("failures").fill_null(0) * 1000.0 / (max(n_nodes, 1) * days))
        .round(2)
        .alias("per_1000_node_days"),
    )


def mtbf_by_component(episodes: pl.DataFrame, node_days: float) -> pl.DataFrame:
    """Per component: failures and MTBF per node in hours over the range."""
    frame = (
        episodes.group_by("component")
        .agg(pl.len().alias("failures"))
        .sort("failures", descending=True)
    )
    return frame.with_columns(
        (pl.lit(node_days * 24.0) / pl.col("failures")).round(0).alias("mtbf_node_h"),
        (pl.col("failures") * 1000.0 / max(node_days, 1e-9)).round(2).alias("per_1000_node_days"),
    )


def jobs_lost(store: Store, f: Filters) -> dict[str, Any]:
    """Jobs that ended FAILED / NODE_FAIL / TIMEOUT in the range and the GPU-hours they ran."""
    where, params = f.jobs_where("j")
    row = store.query(
        "SELECT count(*) AS jobs, coalesce(sum(coalesce(j.n_gpus, 0) * coalesce(j.elapsed_s, "
        'epoch(j."end") - epoch(j.start), 0)) / 3600.0, 0) AS gpu_h, '
        "count(*) FILTER (WHERE j.state = 'NODE_FAIL') AS node_fail "
        f"FROM jobs j WHERE j.state IN ('FAILED', 'NODE_FAIL', 'TIMEOUT') AND {where}",
        params,
    ).row(0, named=True)
    total = store.scalar(f"SELECT count(*) FROM jobs j WHERE {where}", params)
    return {
        "failed_jobs": int(row["jobs"]),
        "gpu_hours_lost": float(row["gpu_h"] or 0.0),
        "node_fail_jobs": int(row["node_fail"]),
        "jobs": int(total or 0),
    }


XID_KINDS = ("xid", "nvlink", "fallen_off_bus", "gsp_timeout")


def top_xids(store: Store, f: Filters, n: int = 10) -> pl.DataFrame:
    if rollups.grain_for(store, f, per_node=True) == "node":
        where, params = rollups.where(f, "node")
        return store.query(
            "SELECT r.code AS xid, any_value(c.name) AS name, sum(r.n)::BIGINT AS events, "
            "count(DISTINCT r.node) AS nodes FROM rollup_node_day r "
            "LEFT JOIN xid_catalog c ON c.xid = r.code "
            f"WHERE r.kind IN (SELECT unnest(?::VARCHAR[])) AND r.code IS NOT NULL AND {where} "
            "GROUP BY r.code ORDER BY events DESC, xid LIMIT ?",
            [list(XID_KINDS), *params, n],
        )
    where, params = f.events_where("e")
    return store.query(
        "SELECT e.code AS xid, any_value(c.name) AS name, count(*) AS events, "
        "count(DISTINCT e.node) AS nodes FROM events e "
        "LEFT JOIN xid_catalog c ON c.xid = e.code "
        f"WHERE e.kind IN ('xid', 'nvlink', 'fallen_off_bus', 'gsp_timeout') "
        f"AND e.code IS NOT NULL AND {where} GROUP BY e.code ORDER BY events DESC, xid LIMIT ?",
        [*params, n],
    )


def latest_predictions(
    store: Store, f: Filters, target: str = "failure", n: int = 50
) -> pl.DataFrame:
    """The newest prediction run made at or before the range's end, highest scores first."""
    hi = f.until or datetime(9999, 1, 1)
    run = store.query(
        "SELECT run_id, made_at FROM predictions WHERE target = ? AND made_at < ? "
        "ORDER BY made_at DESC LIMIT 1",
        [target, hi],
    )
    if run.height == 0:
        return pl.DataFrame(
            schema={
                "node": pl.String,
                "gpu": pl.String,
                "score": pl.Float64,
                "action": pl.String,
                "top_features": pl.String,
                "made_at": pl.Datetime("us"),
                "model_version": pl.String,
                "horizon": pl.Float64,
            }
        )
    node_sql, params = "", [run["run_id"][0], target]
    if f.nodes:
        node_sql = " AND node IN (SELECT unnest(?::VARCHAR[]))"
        params.append(list(f.nodes))
    return store.query(
        "SELECT node, gpu, score, action, top_features, made_at, model_version, horizon "
        f"FROM predictions WHERE run_id = ? AND target = ?{node_sql} "
        "ORDER BY score DESC, node, gpu NULLS FIRST LIMIT ?",
        [*params, n],
    )


# -- events ----------------------------------------------------------------------------------------
def event_where(
    f: Filters, facets: dict[str, list[Any]] | None, search: str | None, alias: str = ""
) -> tuple[str, list[Any]]:
    """``Filters`` plus the explorer's facets (source/kind/code/severity) and free-text search."""
    where, params = f.events_where(alias)
    a = f"{alias}." if alias else ""
    facet_parts, facet_params = facet_where(facets, alias)
    parts = [where, *facet_parts]
    params += facet_params
    if search:
        parts.append(f"({a}message ILIKE ? OR {a}file ILIKE ?)")
        params += [f"%{search}%", f"%{search}%"]
    return " AND ".join(parts), params


def event_facets(
    store: Store, since: datetime | None, until: datetime | None
) -> dict[str, pl.DataFrame]:
    """Counts by source, kind, severity and code in the time range: the explorer's choices."""
    f = Filters(since=since, until=until)
    grain = rollups.grain_for(store, f)
    if grain is not None:
        table, _ = rollups.table(grain)
        where, params = rollups.where(f, grain)
        return {
            col: store.query(
                f"SELECT {col} AS value, sum(n)::BIGINT AS n FROM {table} WHERE {where} "
                f"AND {col} IS NOT NULL GROUP BY 1 ORDER BY n DESC, value LIMIT 200",
                params,
            )
            for col in ("source", "kind", "severity", "code")
        }
    where, params = f.events_where()
    out = {}
    for col in ("source", "kind", "severity", "code"):
        out[col] = store.query(
            f"SELECT {col} AS value, count(*) AS n FROM events WHERE {where} AND {col} IS NOT NULL "
            "GROUP BY 1 ORDER BY n DESC, value LIMIT 200",
            params,
        )
    return out


def event_timeline(
    store: Store,
    f: Filters,
    facets: dict[str, list[Any]] | None = None,
    search: str | None = None,
    by: str = "kind",
    top: int = 8,
) -> pl.DataFrame:
    """Events per time bucket and ``by`` (kind / source / severity); the rest grouped as other."""
    if by not in ("kind", "source", "severity"):
        raise ValueError(f"cannot group the timeline by {by!r}")
    bucket, _ = bucket_for(f.since, f.until)
    grain = rollups.grain_for(store, f, bucket=bucket, search=search)
    if grain is not None:
        table, ts = rollups.table(grain)
        where, params = rollups.where(f, grain, facets)
        counted = "sum(n)"
    else:
        table, ts, counted = "events", "ts", "count(*)"
        where, params = event_where(f, facets, search)
    return store.query(
        f"""
        WITH b AS (
            SELECT time_bucket(INTERVAL '{bucket}', {ts}) AS bucket, {by} AS grp,
                   {counted} AS n
            FROM {table} WHERE {ts} IS NOT NULL AND {where} GROUP BY ALL
        ), t AS (SELECT grp FROM b GROUP BY grp ORDER BY sum(n) DESC LIMIT ?)
        SELECT bucket, CASE WHEN grp IN (SELECT grp FROM t) THEN coalesce(grp, '?')
               ELSE 'other' END AS "{by}", sum(n)::BIGINT AS events
        FROM b GROUP BY ALL ORDER BY bucket, "{by}"
        """,
        [*params, top],
    )


def event_count(
    store: Store, f: Filters, facets: dict[str, list[Any]] | None = None, search: str | None = None
) -> int:
    grain = rollups.grain_for(store, f, search=search)
    if grain is not None:
        table, _ = rollups.table(grain)
        where, params = rollups.where(f, grain, facets)
        return int(store.scalar(f"SELECT sum(n) FROM {table} WHERE {where}", params) or 0)
    where, params = event_where(f, facets, search)
    return int(store.scalar(f"SELECT count(*) FROM events WHERE {where}", params) or 0)


PAGE_WINDOWS = (timedelta(hours=6), timedelta(days=2), timedelta(days=14))


def event_page(
    store: Store,
    f: Filters,
    facets: dict[str, list[Any]] | None = None,
    search: str | None = None,
    *,
    offset: int = 0,
    limit: int = 50,
) -> pl.DataFrame:
    """One page of matching events, newest first, with the file and line they came from.

    Newest-first pages are looked for in the last hours of the range first (the table is stored
    in time order, so a narrow window reads little), widening until the page is full."""
    cols = ", ".join(f'"{c}"' for c in EVENT_COLUMNS)
    sql = (
        f"SELECT {cols} FROM events WHERE {{where}} ORDER BY ts DESC NULLS LAST, file, line "
        "LIMIT ? OFFSET ?"
    )
    if f.until is not None:
        for window in PAGE_WINDOWS:
            lo = f.until - window
            if f.since is not None and lo <= f.since:
                break
            narrow = replace(f, since=lo)
            where, params = event_where(narrow, facets, search)
            page = store.query(sql.format(where=where), [*params, int(limit), int(offset)])
            if page.height == limit:
                return page
    where, params = event_where(f, facets, search)
    return store.query(sql.format(where=where), [*params, int(limit), int(offset)])


# -- data health -----------------------------------------------------------------------------------
def ingest_totals(store: Store) -> dict[str, int]:
    row = store.query(
        "SELECT count(*) AS files, coalesce(sum(lines), 0) AS lines, "
        "coalesce(sum(parsed), 0) AS parsed, coalesce(sum(noise), 0) AS noise, "
        "coalesce(sum(quarantined), 0) AS quarantined, coalesce(sum(bytes), 0) AS bytes, "
        "count(*) FILTER (WHERE status NOT IN ('ok', 'unchanged')) AS not_ok "
        "FROM ingested_files"
    ).row(0, named=True)
    return {k: int(v or 0) for k, v in row.items()}


def ingested_files(store: Store, limit: int = 500) -> pl.DataFrame:
    return store.query(
        "SELECT path, format, status, lines, parsed, noise, quarantined, bytes, ingested_at, "
        "error FROM ingested_files ORDER BY quarantined DESC, path LIMIT ?",
        [limit],
    )


def ingest_by_format(store: Store) -> pl.DataFrame:
    return store.query(
        "SELECT coalesce(format, '?') AS format, count(*) AS files, sum(parsed)::BIGINT AS parsed, "
        "sum(noise)::BIGINT AS noise, sum(quarantined)::BIGINT AS quarantined "
        "FROM ingested_files GROUP BY 1 ORDER BY parsed DESC"
    )


def quarantine_reasons(store: Store) -> pl.DataFrame:
    return store.query(
        "SELECT reason, count(*) AS lines, count(DISTINCT file) AS files FROM quarantine "
        "GROUP BY reason ORDER BY lines DESC, reason LIMIT 100"
    )


def quarantine_page(
    store: Store,
    reason: str | None = None,
    search: str | None = None,
    *,
    offset: int = 0,
    limit: int = 50,
) -> tuple[int, pl.DataFrame]:
    parts, params = ["TRUE"], []
    if reason:
        parts.append("reason = ?")
        params.append(reason)
    if search:
        parts.append("(raw ILIKE ? OR file ILIKE ?)")
        params += [f"%{search}%", f"%{search}%"]
    where = " AND ".join(parts)
    total = int(store.scalar(f"SELECT count(*) FROM quarantine WHERE {where}", params) or 0)
    page = store.query(
        f"SELECT file, line, reason, raw FROM quarantine WHERE {where} ORDER BY file, line "
        "LIMIT ? OFFSET ?",
        [*params, int(limit), int(offset)],
    )
    return total, page

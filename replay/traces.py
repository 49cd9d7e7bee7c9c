"""Interruption traces from the database, from a synthetic ground-truth file, or from public traces.

Database: job failures with a cause (table ``attributions``) plus hardware events (fatal Xids, a GPU
fallen off the bus, init failures, NVSwitch errors, fatal NVLink, node down, job NODE_FAIL) and
planned maintenance (a drain whose reason says maintenance), deduplicated per node (per job for NCCL
timeouts) within ``dedup_min``. An event *gave warning* when a precursor (ECC, row remap, thermal,
non-fatal NVLink, Xid 63/64/92) hit its node within ``warn_h`` hours before it (at least
``min_lead_min`` before), or it was planned. It was *predicted* when a ``predictions`` row for its
node with ``score >= threshold`` was made within its horizon before it; alerts no failure followed
are false alarms (one per node per horizon).
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from faultlens.ingest.errors import InputError
from faultlens.ingest.schema import SITE_DATASET, CauseCategory, IncidentCategory, Severity
from faultlens.ingest.store import Store
from faultlens.models.fleet import data_window, file_filter, fleet, with_override
from faultlens.replay.model import Trace

log = logging.getLogger(__name__)

PRECURSOR_XIDS = (63, 64, 92)
PRECURSOR_KINDS = ("ecc", "row_remap", "thermal")
HARDWARE_CAUSES = {
    CauseCategory.GPU_HARDWARE.value,
    CauseCategory.GPU_MEMORY.value,
    CauseCategory.NETWORK.value,
    CauseCategory.HOST.value,
}


def _in(values: tuple) -> str:
    return ", ".join("?" for _ in values)


ROW_SCHEMA = {
    "ts": pl.Datetime("us"),
    "node": pl.String,
    "job_id": pl.String,
    "kind": pl.String,
    "planned": pl.Boolean,
    "hardware": pl.Boolean,
    "repair_h": pl.Float64,
}
NODE_CATEGORIES = (
    IncidentCategory.GPU.value,
    IncidentCategory.GPU_MEMORY.value,
    IncidentCategory.HOST.value,
    IncidentCategory.NETWORK.value,
    IncidentCategory.MAINTENANCE.value,
)


def _incident_rows(store: Store, dataset: str, since: datetime, until: datetime) -> pl.DataFrame:
    """Incident records that interrupt a job (not warnings), with their own repair times; a
    record naming the node's hardware (or maintenance) takes the node out for repair."""
    where, params = file_filter(dataset)
    return store.query(
        "SELECT start AS ts, node, NULL AS job_id, 'incident:' || coalesce(category, 'unknown') "
        "AS kind, category = ? AS planned, list_contains(?::VARCHAR[], category) AS hardware, "
        f"repair_h FROM incidents WHERE {where} AND dataset = ? AND start >= ? AND start < ? "
        "AND node IS NOT NULL AND coalesce(severity, '') <> ?",
        [
            IncidentCategory.MAINTENANCE.value,
            list(NODE_CATEGORIES),
            *params,
            dataset,
            since,
            until,
            Severity.WARNING.value,
        ],
    ).cast(ROW_SCHEMA)


def _interruption_rows(
    store: Store, since: datetime, until: datetime, dataset: str = SITE_DATASET
) -> pl.DataFrame:
    """Interruptions: hardware failure episodes (``models.target``, the one definition of a
    hardware failure), nodes going down, NCCL watchdog timeouts, job failures attributed to
    anything but the user, planned maintenance, and incident records (with their repair times;
    their own ``incident`` events are not counted twice). A dataset other than the site's own
    is its incident records alone."""
    from faultlens.models.target import failure_episodes

    incidents = _incident_rows(store, dataset, since, until)
    if dataset != SITE_DATASET:
        return incidents.sort("ts")
    schema = {k: v for k, v in ROW_SCHEMA.items() if k != "repair_h"}
    episodes = failure_episodes(store, since, until).filter(pl.col("cause") != "incident")
    episodes = episodes.select(
        "ts",
        "node",
        pl.lit(None, pl.String).alias("job_id"),
        pl.col("cause").alias("kind"),
        pl.lit(False).alias("planned"),
        pl.lit(True).alias("hardware"),
    )
    rest = store.query(
        "SELECT ts, node, job_id, kind, false AS planned, kind <> 'nccl_timeout' AS hardware "
        "FROM events WHERE ts IS NOT NULL AND node IS NOT NULL AND ts >= ? AND ts < ? "
        "AND kind IN ('node_down', 'job_node_fail', 'nccl_timeout') "
        "UNION ALL SELECT ts, node, job_id, kind, true, true FROM events "
        "WHERE ts IS NOT NULL AND node IS NOT NULL AND ts >= ? AND ts < ? "
        "AND kind = 'node_drain' AND lower(coalesce(message, '')) LIKE '%maint%' "
        "UNION ALL SELECT \"end\", node, job_id, 'attributed:' || cause, false, "
        f"cause IN ({_in(tuple(sorted(HARDWARE_CAUSES)))}) FROM attributions "
        'WHERE "end" IS NOT NULL AND node IS NOT NULL AND "end" >= ? AND "end" < ? '
        "AND cause <> ?",
        [
            since,
            until,
            since,
            until,
            *sorted(HARDWARE_CAUSES),
            since,
            until,
            CauseCategory.USER_UNKNOWN.value,
        ],
    )
    logs = pl.concat([episodes.cast(schema), rest.cast(schema)])
    logs = logs.with_columns(pl.lit(None, pl.Float64).alias("repair_h"))
    return pl.concat([logs, incidents]).sort("ts")


def dedup(frame: pl.DataFrame, window_min: float) -> pl.DataFrame:
    """One interruption per key (node; job for NCCL timeouts) per burst of ``window_min``."""
    if frame.height == 0:
        return frame
    key = (
        pl.when(pl.col("kind") == "nccl_timeout")
        .then(pl.concat_str([pl.lit("job:"), pl.col("job_id").fill_null(pl.col("node"))]))
        .otherwise(pl.col("node"))
    )
    window = pl.duration(seconds=int(window_min * 60))
    out = (
        frame.with_columns(key.alias("_key"))
        .sort("_key", "ts")
        .with_columns((pl.col("ts") - pl.col("ts").shift(1).over("_key")).alias("_gap"))
        .with_columns(((pl.col("_gap").is_null()) | (pl.col("_gap") > window)).alias("_new"))
        .with_columns(pl.col("_new").cum_sum().over("_key").alias("_burst"))
        .group_by("_key", "_burst")
        .agg(
            pl.col("ts").min(),
            pl.col("node").first(),
            pl.col("hardware").any(),
            pl.col("planned").any(),
            pl.col("kind").first(),
            *([pl.col("repair_h").max()] if "repair_h" in frame.columns else []),
        )
    )
    return out.drop("_key", "_burst").sort("ts")


def _flag_before(
    events: pl.DataFrame, marks: pl.DataFrame, lead: timedelta, window: timedelta
) -> pl.Series:
    """For each event, whether a mark on its node fell in ``[ts - window, ts - lead]``."""
    if events.height == 0 or marks.height == 0:
        return pl.Series([False] * events.height)
    left = events.select(
        "node", (pl.col("ts") - lead).alias("_at"), pl.arange(0, events.height).alias("_i")
    ).sort("_at")
    right = marks.select("node", pl.col("ts").alias("_mark")).sort("_mark")
    joined = left.join_asof(
        right,
        left_on="_at",
        right_on="_mark",
        by="node",
        strategy="backward",
        tolerance=window - lead,
        check_sortedness=False,
    )
    return joined.sort("_i")["_mark"].is_not_null()


def from_db(
    store: Store,
    since: datetime | None = None,
    until: datetime | None = None,
    *,
    dataset: str = SITE_DATASET,
    fleet_gpus: int | None = None,
    gpus_per_node: int | None = None,
    warn_h: float = 24.0,
    min_lead_min: float = 5.0,
    dedup_min: float = 15.0,
    alert_threshold: float = 0.5,
) -> Trace:
    """The interruptions of ``dataset`` between ``since`` and ``until`` (default: the data's own
    span) on its fleet (``models.fleet``; ``fleet_gpus`` / ``gpus_per_node`` override it)."""
    lo, hi = _window(store, since, until, dataset)
    rows = dedup(_interruption_rows(store, lo, hi, dataset), dedup_min)
    lead, window = timedelta(minutes=min_lead_min), timedelta(hours=warn_h)
    pre = store.query(
        "SELECT ts, node FROM events WHERE ts IS NOT NULL AND node IS NOT NULL AND ts < ? AND ("
        f"kind IN ({_in(PRECURSOR_KINDS)}) OR (kind = 'xid' AND code IN ({_in(PRECURSOR_XIDS)}))"
        " OR (kind = 'nvlink' AND lower(coalesce(subkind, '')) LIKE 'nonfatal%'))",
        [hi, *PRECURSOR_KINDS, *PRECURSOR_XIDS],
    )
    warned = _flag_before(rows, pre, lead, window) | rows["planned"] if rows.height else None
    alerts = store.query(
        "SELECT made_at AS ts, node, horizon FROM predictions WHERE target = 'failure' "
        "AND score >= ? AND made_at IS NOT NULL AND node IS NOT NULL AND made_at < ? "
        "ORDER BY made_at",
        [alert_threshold, hi],
    )
    horizon_h = float(alerts["horizon"].max() or 24.0) if alerts.height else 24.0
    predicted = _flag_before(rows, alerts, lead, timedelta(hours=horizon_h))
    fl = with_override(
        fleet(store, dataset, (lo, hi), gpus_per_node=gpus_per_node),
        fleet_gpus=fleet_gpus,
        gpus_per_node=gpus_per_node,
    )
    if fl.thin:
        log.warning("%s", fl.note)
    nodes = sorted(set(rows["node"].drop_nulls().to_list())) if rows.height else []
    index = {n: i for i, n in enumerate(nodes)}
    t_h = _hours(rows["ts"], lo) if rows.height else np.zeros(0)
    repair = rows["repair_h"].fill_null(np.nan).to_numpy() if rows.height else np.zeros(0)
    return Trace(
        t_h=t_h,
        node=np.array([index.get(n, -1) for n in rows["node"].to_list()], dtype=np.int64),
        hardware=rows["hardware"].to_numpy().astype(bool) if rows.height else np.zeros(0, bool),
        warned=warned.to_numpy().astype(bool) if warned is not None else np.zeros(0, bool),
        predicted=predicted.to_numpy().astype(bool),
        span_h=(hi - lo).total_seconds() / 3600.0,
        fleet_nodes=max(fl.nodes, len(nodes), 1),
        gpus_per_node=fl.gpus_per_node,
        false_alarm_h=_false_alarms(alerts, rows, lo, hi, horizon_h),
        cause=tuple(rows["kind"].to_list()) if rows.height else (),
        start=lo,
        source="db" if dataset == SITE_DATASET else f"db:{dataset}",
        repair_h=repair if np.isfinite(repair).any() else None,
        fleet_source=fl.source,
    )


def _window(
    store: Store, since: datetime | None, until: datetime | None, dataset: str = SITE_DATASET
) -> tuple[datetime, datetime]:
    span = data_window(store, dataset)
    lo = since or (span[0] if span else None)
    hi = until or (span[1] if span else None)
    if lo is None or hi is None or hi <= lo:
        return datetime(1970, 1, 1), datetime(1970, 1, 1, 1)
    return lo, hi


def override_fleet(trace: Trace, fleet_gpus: int | None, gpus_per_node: int | None) -> Trace:
    """``trace`` on a fleet of ``fleet_gpus`` GPUs / ``gpus_per_node`` (the command line's)."""
    gpn = int(gpus_per_node or trace.gpus_per_node)
    nodes = -(-int(fleet_gpus) // gpn) if fleet_gpus else trace.fleet_nodes
    return replace(trace, fleet_nodes=max(1, nodes), gpus_per_node=gpn, fleet_source="override")


def fleet_note(trace: Trace) -> str:
    """One line on the fleet a replay used and where it came from."""
    where = {
        "nodes": "from the fleet records",
        "inventory": "from the GPU inventory and the jobs' node lists",
        "failing_nodes": "inferred from failing nodes (no inventory: a lower bound; "
        "give --fleet-gpus)",
        "override": "as given (--fleet-gpus / --gpus-per-node)",
    }.get(trace.fleet_source, f"from the {trace.source} trace")
    return (
        f"fleet of {trace.fleet_nodes:,} nodes x {trace.gpus_per_node} GPUs "
        f"({trace.fleet_nodes * trace.gpus_per_node:,} GPUs) {where}"
    )


def _hours(ts: pl.Series, start: datetime) -> np.ndarray:
    return ((ts - start).dt.total_microseconds().to_numpy() / 3.6e9).astype(float)


def _false_alarms(
    alerts: pl.DataFrame, rows: pl.DataFrame, lo: datetime, hi: datetime, horizon_h: float
) -> np.ndarray:
    """Alerts (one per node per horizon) that no interruption on that node followed in time."""
    if alerts.height == 0:
        return np.zeros(0)
    horizon = timedelta(hours=horizon_h)
    first = (
        alerts.sort("node", "ts")
        .with_columns((pl.col("ts") - pl.col("ts").shift(1).over("node")).alias("_gap"))
        .filter(pl.col("_gap").is_null() | (pl.col("_gap") > horizon))
        .drop("_gap")
        .filter((pl.col("ts") >= lo) & (pl.col("ts") < hi))
        .sort("ts")
    )
    if rows.height:
        nxt = first.join_asof(
            rows.select("node", pl.col("ts").alias("_fail")).sort("_fail"),
            left_on="ts",
            right_on="_fail",
            by="node",
            strategy="forward",
            tolerance=horizon,
            check_sortedness=False,
        )
        first = nxt.filter(pl.col("_fail").is_null())
    return np.sort(_hours(first["ts"], lo)) if first.height else np.zeros(0)


# -- synthetic ground truth -----------------------------------------------------------------------
SOFTWARE_CATEGORIES = {CauseCategory.SOFTWARE.value, CauseCategory.USER_UNKNOWN.value}


def from_ground_truth(path: str | Path, dedup_min: float = 15.0) -> Trace:
    """A trace from synth's ``ground_truth.json``: failures (hardware unless their category is
    software) and job interruptions that no failure on the same node explains."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise InputError(f"cannot read ground truth {path}: {e}") from e
    failures = [
        _gt_row(f, hardware=f.get("category") not in SOFTWARE_CATEGORIES)
        for f in doc.get("failures", [])
    ]
    inter = [_gt_row(i, hardware=False) for i in doc.get("interruptions", [])]
    frame = pl.DataFrame(
        failures + inter,
        schema={
            "ts": pl.Datetime("us"),
            "node": pl.String,
            "job_id": pl.String,
            "kind": pl.String,
            "planned": pl.Boolean,
            "hardware": pl.Boolean,
            "warned": pl.Boolean,
        },
    )
    if frame.height == 0:
        raise InputError(f"{path}: no failures or interruptions")
    rows = dedup(frame.drop("warned"), dedup_min).join_asof(
        frame.filter("warned").select("node", pl.col("ts").alias("_w")).sort("_w"),
        left_on="ts",
        right_on="_w",
        by="node",
        strategy="nearest",
        tolerance=timedelta(minutes=dedup_min),
        check_sortedness=False,
    )
    cfg = _gt_config(doc)
    lo = cfg.get("start") or frame["ts"].min()
    span_h = float(cfg.get("days", 0) or 0) * 24.0 or (_hours(frame["ts"], lo).max() + 1.0)
    nodes = sorted(set(frame["node"].drop_nulls().to_list()) | set(cfg.get("node_names", [])))
    index = {n: i for i, n in enumerate(nodes)}
    return Trace(
        t_h=_hours(rows["ts"], lo),
        node=np.array([index.get(n, -1) for n in rows["node"]]),
        hardware=rows["hardware"].to_numpy().astype(bool),
        warned=(rows["_w"].is_not_null() | rows["planned"]).to_numpy().astype(bool),
        predicted=np.zeros(rows.height, dtype=bool),
        span_h=float(span_h),
        fleet_nodes=max(int(cfg.get("nodes") or 0), len(nodes), 1),
        gpus_per_node=int(cfg.get("gpus_per_node") or 8),
        cause=tuple(rows["kind"].to_list()),
        start=lo,
        source="synth",
    )


def _gt_row(item: dict[str, Any], hardware: bool) -> dict[str, Any]:
    warned = any(bool(item.get(k)) for k in ("warned", "precursor", "precursors", "precursor_ts"))
    cause = str(item.get("cause") or item.get("category") or "unknown")
    return {
        "ts": _parse_ts(item["ts"]),
        "node": item.get("node"),
        "job_id": item.get("job_id"),
        "kind": cause,
        "planned": "maint" in cause.lower(),
        "hardware": hardware,
        "warned": warned,
    }


def _parse_ts(value: Any) -> datetime:
    if isinstance(value, int | float):
        return datetime(1970, 1, 1) + timedelta(seconds=float(value))
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).replace(tzinfo=None)


def _gt_config(doc: dict[str, Any]) -> dict[str, Any]:
    cfg = dict(doc.get("config") or {})
    for key in ("nodes", "days", "gpus_per_node", "start"):
        if key in doc and key not in cfg:
            cfg[key] = doc[key]
    if isinstance(cfg.get("nodes"), list):
        cfg["node_names"], cfg["nodes"] = cfg["nodes"], len(cfg["nodes"])
    if cfg.get("start") is not None:
        cfg["start"] = _parse_ts(cfg["start"])
    return cfg


# -- public traces ---------------------------------------------------------------------------------
def acme_rates(path: str | Path) -> pl.DataFrame:
    """Per cluster of AcmeTrace's summary: failed GPU jobs per GPU-hour of service, job sizes."""
    df = pl.read_csv(path)
    gpu_s = pl.col("complete_gpu_time") + pl.col("cancel_gpu_time") + pl.col("fail_gpu_time")
    gpu_h = gpu_s / 3600
    return df.select(
        pl.col("id").alias("cluster"),
        pl.col("gpu_job_num"),
        (pl.col("gpu_job_num") * pl.col("fail_rate_gpu")).alias("failed_gpu_jobs"),
        gpu_h.alias("gpu_hours"),
        (pl.col("gpu_job_num") * pl.col("fail_rate_gpu") / gpu_h).alias("failures_per_gpu_h"),
        pl.col("fail_rate_gpu_time").alias("failed_gpu_time_share"),
        pl.col("avg_gpu_num"),
        pl.col("med_gpu_num"),
        pl.col("max_gpu"),
    )


def alibaba2023_trace(pods: str | Path, gpu_nodes: str | Path) -> Trace:
    """The failed GPU pods of Alibaba's 2023 GPU trace, at their deletion time, on its GPU fleet.

    The trace names no node nor cause for a failure: every one is a software-style interruption of
    the whole-fleet job (an upper bound on what a job sees)."""
    pod = pl.read_csv(pods, infer_schema_length=10000)
    nodes = pl.read_csv(gpu_nodes)
    failed = pod.filter((pl.col("pod_phase") == "Failed") & (pl.col("num_gpu") > 0))
    t_h = np.sort(failed["deletion_time"].cast(pl.Float64).to_numpy() / 3600.0)
    span_h = float(pod["deletion_time"].max()) / 3600.0
    n = len(t_h)
    return Trace(
        t_h=t_h,
        node=np.full(n, -1),
        hardware=np.zeros(n, bool),
        warned=np.zeros(n, bool),
        predicted=np.zeros(n, bool),
        span_h=span_h,
        fleet_nodes=nodes.height,
        gpus_per_node=max(1, round(float(nodes["gpu"].mean()))),
        source="alibaba2023",
    )

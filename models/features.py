"""Failure-prediction features, computed from the database as of a time, never looking past it.

Everything starts from **hourly buckets**: DuckDB aggregates events, telemetry, jobs, attributions
and failure episodes into sparse per-(node, GPU, hour) counts (``BASES``). Bucket ``b`` covers
``[anchor + b h, anchor + (b + 1) h)``. A feature row at time ``t`` sees only buckets that end at or
before ``t``; its window features are sums (or maxima) over the last ``w`` buckets.

Two evaluators share the buckets and the feature list:

- ``FeatureGrid`` (training): a dense node x hour grid; each base column becomes an
  N x T matrix and every window feature is one vectorized prefix-sum difference (or a running
  maximum) along the time axis. One pass builds the whole training table; rows are gathered only
  where the caller asks (e.g. a negative subsample), so memory stays at one matrix per column.
- ``point_features`` (prediction): one row per node and per GPU as of ``as_of``, from the same
  buckets anchored at ``as_of``, by filtered group-by aggregates.

A test checks that both give the same numbers for the same time. GPU rows hold the GPU's own
evidence plus the node-wide evidence (NCCL, Slurm, events that name no GPU).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
import polars as pl
from scipy.ndimage import maximum_filter1d

from ingest.catalog import packaged_catalog
from ingest.store import Store
from models.target import (
    HARDWARE_CAUSES,
    TARGET_EVENT_SQL,
    episodes_from_events,
    target_event_params,
    target_events,
)

log = logging.getLogger(__name__)

HOUR = timedelta(hours=1)
HOUR_US = 3_600_000_000
W1, W6, W24, W72, W7D, W28D = 1, 6, 24, 72, 168, 672
MAX_WINDOW_H = W28D
HOURS_SINCE_CAP = float(W28D)
# Clock-event reasons that mean the hardware slowed itself down: HW slowdown, SW / HW thermal,
# HW power brake (DCGM_FI_DEV_CLOCK_THROTTLE_REASONS bits 0x8, 0x20, 0x40, 0x80).
THROTTLE_HW_MASK = 0x8 | 0x20 | 0x40 | 0x80


@dataclass(frozen=True)
class Base:
    """One hourly base column and the windows (hours) it is summed (or maxed) over."""

    name: str
    source: str  # events | telemetry | jobs | attributions | failures
    windows: tuple[int, ...]
    agg: str = "sum"  # sum | max
    cond: str = ""  # SQL filter for events / telemetry metric list key
    params: tuple[object, ...] = ()


def _catalog_sets() -> tuple[dict[str, list[int]], list[int], list[int]]:
    cat = packaged_catalog()
    by_cat: dict[str, list[int]] = {}
    for xid, category in zip(cat["xid"].to_list(), cat["category"].to_list(), strict=True):
        by_cat.setdefault(category, []).append(int(xid))
    severe = ["reset_gpu", "reboot_node", "drain_node"]
    critical = cat.filter(pl.col("typical_action").is_in(severe))
    drain = cat.filter(pl.col("typical_action").is_in(["reboot_node", "drain_node"]))
    return (by_cat, sorted(int(x) for x in critical["xid"].to_list()),
            sorted(int(x) for x in drain["xid"].to_list()))


# Hardware warnings: what a part on its way out logs before it fails (correctable ECC, row
# remaps, contained ECC, non-fatal NVLink, corrected PCIe AER, GSP timeouts, host EDAC / MCE,
# NVMe timeouts, thermal), never a target event itself. A healthy part logs one or two of them
# now and then; a failing one escalates: more of them, on one GPU, over hours to days. The
# ``warn`` features count them of any kind, so that an escalation of a rarely seen kind still
# looks like one; ``warn_streak`` is, per event, the warnings of the same GPU (or of the node, for
# host warnings) in the ``WARN_STREAK_H`` hours up to it, maxed over the window.
WARN_KINDS = ("ecc", "row_remap", "nvlink", "sxid", "pcie", "gsp_timeout", "thermal", "memory",
              "mce", "storage")
WARN_XIDS = (63, 74, 92, 94, 119, 144, 145, 146, 147, 148, 149, 150)
WARN_STREAK_H = 72
XID_CATEGORIES = ("memory", "hardware", "interconnect", "driver", "application", "other")
KEY_XIDS = (13, 31, 48, 63, 64, 74, 79, 92, 94, 95, 119)
_BY_CAT, CRITICAL_XIDS, DRAIN_XIDS = _catalog_sets()


def _ev(name: str, windows: tuple[int, ...], cond: str, *params: object) -> Base:
    return Base(name, "events", windows, "sum", cond, params)


def _kinds(name: str, windows: tuple[int, ...], *kinds: str) -> Base:
    return _ev(name, windows, "list_contains(?::VARCHAR[], kind)", list(kinds))


EVENT_BASES: tuple[Base, ...] = (
    _ev("xid_all", (W1, W24, W7D, W28D), "kind = 'xid'"),
    _ev("xid_critical", (W1, W24, W7D), "kind = 'xid' AND list_contains(?::INTEGER[], code)",
        CRITICAL_XIDS),
    _ev("xid_drain", (W1, W24), "kind = 'xid' AND list_contains(?::INTEGER[], code)", DRAIN_XIDS),
    *(
        _ev(f"xid_{c}", (W1, W24, W7D), "kind = 'xid' AND list_contains(?::INTEGER[], code)",
            _BY_CAT.get(c, []))
        for c in XID_CATEGORIES
    ),
    *(_ev(f"xid{x}", (W24, W7D), "kind = 'xid' AND code = ?", x) for x in KEY_XIDS),
    _kinds("ecc", (W1, W24, W7D), "ecc"),
    _kinds("row_remap", (W24, W7D), "row_remap"),
    _kinds("nvlink", (W1, W24, W7D), "nvlink", "sxid"),
    _kinds("pcie", (W24, W7D), "pcie"),
    _kinds("off_bus", (W24, W7D), "fallen_off_bus", "gpu_init_fail", "reset_required"),
    _kinds("gsp", (W24, W7D), "gsp_timeout"),
    _kinds("thermal", (W24, W7D), "thermal"),
    _kinds("host_mem", (W24, W7D), "memory", "mce"),
    _kinds("ib_port", (W24, W7D), "ib_port"),
    _kinds("hung_task", (W24, W7D), "hung_task"),
    _kinds("unhealthy", (W24, W7D), "device_unhealthy", "diag"),
    _kinds("nccl_error", (W1, W24, W7D), "nccl_error"),
    _kinds("nccl_timeout", (W1, W24, W7D), "nccl_timeout"),
    _kinds("process_failed", (W24, W7D), "process_failed"),
    _kinds("node_down", (W24, W7D, W28D), "node_down", "node_not_responding"),
    _kinds("node_drain", (W24, W7D, W28D), "node_drain"),
    _kinds("job_requeue", (W7D, W28D), "job_requeue"),
    _ev("severe", (W1, W24), "severity IN ('error', 'critical')"),
    _ev("warn", (W1, W6, W24, W72, W7D), "warn"),
    Base("warn_streak", "events", (W24, W72), "max", "warn"),
    _kinds("pcie_w", (W72,), "pcie"),
    _kinds("gsp_w", (W72,), "gsp_timeout"),
    _ev("xid74_w", (W72,), "kind = 'xid' AND code = 74"),
    _ev("xid63_w", (W72,), "kind = 'xid' AND code = 63"),
)

# Telemetry: counters become hourly increments; gauges become hourly max / sum / sample count.
COUNTER_METRICS: dict[str, tuple[str, ...]] = {
    "ecc_sbe_inc": ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL"),
    "ecc_dbe_inc": ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL"),
    "retired_inc": ("DCGM_FI_DEV_RETIRED_SBE", "DCGM_FI_DEV_RETIRED_DBE",
                    "DCGM_FI_DEV_RETIRED_PENDING"),
    "remap_corr_inc": ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",),
    "remap_uncorr_inc": ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",),
    "remap_fail_inc": ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_ROW_REMAP_PENDING"),
    "pcie_replay_inc": ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER",),
    "nvlink_err_inc": ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
                       "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
                       "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
                       "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL"),
    "violation_inc": ("DCGM_FI_DEV_THERMAL_VIOLATION", "DCGM_FI_DEV_POWER_VIOLATION",
                      "DCGM_FI_DEV_RELIABILITY_VIOLATION"),
}
COUNTER_WINDOWS: dict[str, tuple[int, ...]] = {
    "ecc_sbe_inc": (W1, W24, W7D), "pcie_replay_inc": (W1, W24, W7D),
    "nvlink_err_inc": (W1, W24, W7D),
}
# Per-hour increments below these floors are background, not evidence: NVLink CRC counters tick
# now and then on healthy long links [assumed: a handful per hour]. Without a floor the feature
# also says "this node is being scraped", which is not a property of the hardware.
COUNTER_NOISE_FLOOR: dict[str, float] = {"nvlink_err_inc": 10.0}
# Gauges. Only their excursions are features: ``temp_hot_*`` is degrees above TEMP_NORMAL_C
# (H100 / B200 run about 60-80 C under load and slow down near 87 C [assumed]); a normal reading
# and a missing one are the same 0. Raw temperature and power levels are left out on purpose:
# they mostly say whether telemetry was collected for the node, and where telemetry is exported
# (as in the synthetic cluster, around incidents) that would leak the answer.
GAUGE_METRICS: dict[str, tuple[str, ...]] = {
    "temp": ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_MEMORY_TEMP"),
}
TEMP_NORMAL_C = 80.0
THROTTLE_METRICS = ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS")

TELEMETRY_BASES: tuple[Base, ...] = (
    *(Base(n, "telemetry", COUNTER_WINDOWS.get(n, (W24, W7D))) for n in COUNTER_METRICS),
    Base("throttle_hw", "telemetry", (W24, W7D)),
    Base("temp_max", "telemetry", (W1, W24, W7D), "max"),
    Base("temp_sum", "telemetry", (W24,)),
    Base("temp_n", "telemetry", (W24,)),
)
OTHER_BASES: tuple[Base, ...] = (
    Base("node_fail_single", "jobs", (W7D, W28D)),
    Base("node_fail_multi", "jobs", (W7D, W28D)),
    Base("jobs_failed", "jobs", (W24, W7D)),
    Base("attr_any", "attributions", (W24, W7D, W28D)),
    Base("attr_hw", "attributions", (W7D, W28D)),
    Base("fail", "failures", (W24, W7D, W28D)),
)
BASES: tuple[Base, ...] = EVENT_BASES + TELEMETRY_BASES + OTHER_BASES
# Helper columns that only feed derived features (means) and are not features themselves.
_HELPERS = {"temp_sum_24h", "temp_n_24h", "temp_max_1h", "temp_max_24h", "temp_max_7d"}
_TEMP_HOT = {"temp_hot_1h": "temp_max_1h", "temp_hot_24h": "temp_max_24h",
             "temp_hot_7d": "temp_max_7d"}
# Per-kind weekly warning counts behind ``warn_kinds_7d`` (distinct warning kinds).
WARN_KIND_COLUMNS = ("ecc_7d", "row_remap_7d", "nvlink_7d", "pcie_7d", "gsp_7d", "thermal_7d",
                     "host_mem_7d", "xid63_7d", "xid74_7d", "xid92_7d", "xid94_7d", "xid119_7d",
                     "ecc_sbe_inc_7d", "pcie_replay_inc_7d", "nvlink_err_inc_7d", "retired_inc_7d",
                     "remap_corr_inc_7d")
DERIVED_WARN = ("warn_kinds_7d", "warn_escalation")


def window_name(base: str, w: int) -> str:
    if w % 24 == 0 and w >= W7D:
        return f"{base}_{w // 24}d"
    return f"{base}_{w}h"


def feature_names() -> list[str]:
    """The model's feature columns, in order."""
    names = [window_name(b.name, w) for b in BASES for w in b.windows]
    names = [n for n in names if n not in _HELPERS]
    return [*names, *_TEMP_HOT, "temp_hot_mean_24h", *DERIVED_WARN, "hours_since_fail"]


FEATURES: tuple[str, ...] = tuple(feature_names())

# Hardware-warning evidence (never a target event itself): more of it never lowers the risk.
# The model gets these as LightGBM monotone constraints, so that a rare warning kind with few
# training examples still pushes the score up instead of landing in a leaf learned from noise.
MONOTONE_BASES = frozenset({
    "warn", "warn_streak", "pcie_w", "gsp_w", "xid74_w", "xid63_w", "pcie", "gsp", "thermal",
    "host_mem", "xid63", "xid92", "xid94", "xid119", "ecc_sbe_inc", "retired_inc",
    "remap_corr_inc", "pcie_replay_inc", "nvlink_err_inc", "violation_inc", "throttle_hw",
})
MONOTONE_FEATURES = frozenset(
    {window_name(b.name, w) for b in BASES if b.name in MONOTONE_BASES for w in b.windows}
    | set(DERIVED_WARN) | set(_TEMP_HOT) | {"temp_hot_mean_24h"}
)


def monotone_constraints() -> tuple[int, ...]:
    """LightGBM ``monotone_constraints`` for ``FEATURES``: +1 for warning evidence, else 0."""
    return tuple(1 if f in MONOTONE_FEATURES else 0 for f in FEATURES)


# -- hourly buckets (DuckDB) -----------------------------------------------------------------------

def _bucket_sql(col: str) -> str:
    return f"CAST(floor((epoch_us({col}) - ?) / {HOUR_US}.0) AS BIGINT)"


def _anchor_us(anchor: datetime) -> int:
    return int((anchor - datetime(1970, 1, 1)) / timedelta(microseconds=1))


def _gkey_events(per_gpu: bool) -> str:
    if not per_gpu:
        return "''"
    return "coalesce(CAST(e.gpu_index AS VARCHAR), CAST(g.gi AS VARCHAR), e.gpu, '')"


def _point_wrap(sql: str, bases: Sequence[Base]) -> str:
    """Aggregate an hourly-bucket query into one row per (node, gkey) with every window
    feature of ``bases`` (buckets are relative to ``as_of``, so a window is ``b >= -w``)."""
    aggs = []
    for base in bases:
        fn = "max" if base.agg == "max" else "sum"
        for w in base.windows:
            aggs.append(f"CAST(coalesce({fn}({base.name}) FILTER (WHERE b >= -{int(w)}), 0) "
                        f"AS FLOAT) AS {window_name(base.name, w)}")
    return f"SELECT node, gkey, {', '.join(aggs)} FROM ({sql}) GROUP BY node, gkey"


def _warn_sql() -> tuple[str, list[object]]:
    """SQL predicate (events alias e) for a hardware warning, and its parameters."""
    sql = (f"((list_contains(?::VARCHAR[], e.kind) OR (e.kind = 'xid' AND "
           f"list_contains(?::INTEGER[], e.code))) AND NOT {TARGET_EVENT_SQL})")
    return sql, [list(WARN_KINDS), list(WARN_XIDS), *target_event_params()]


def event_buckets(store: Store, lo: datetime, hi: datetime, anchor: datetime,
                  per_gpu: bool, point: bool = False) -> pl.DataFrame:
    """Event counts per (node, GPU key, hour). Events are read from ``WARN_STREAK_H`` before
    ``lo`` so that a warning streak sees its history; buckets before ``lo`` are dropped by the
    caller."""
    cols, params = [], []
    for b in EVENT_BASES:
        if b.name == "warn_streak":
            cols.append("coalesce(max(streak), 0) AS warn_streak")
            continue
        cols.append(f"count(*) FILTER (WHERE {b.cond}) AS {b.name}")
        params.extend(b.params)
    warn, warn_params = _warn_sql()
    gpu = _gkey_events(True)
    sql = (
        f"WITH x AS (SELECT e.node, {_gkey_events(per_gpu)} AS gkey, {gpu} AS gpu_key, "
        f"{_bucket_sql('e.ts')} AS b, e.ts, e.kind, e.code, e.severity, {warn} AS warn "
        "FROM events e LEFT JOIN (SELECT node, pci_bus_id, min(gpu_index) AS gi FROM gpus "
        "WHERE pci_bus_id IS NOT NULL GROUP BY ALL) g ON g.node = e.node AND g.pci_bus_id = e.gpu "
        "WHERE e.ts >= ? AND e.ts < ? AND e.node IS NOT NULL), "
        "y AS (SELECT *, CASE WHEN warn THEN sum(CAST(warn AS INTEGER)) OVER ("
        "PARTITION BY node, gpu_key ORDER BY ts RANGE BETWEEN "
        f"INTERVAL {WARN_STREAK_H} HOURS PRECEDING AND CURRENT ROW) END AS streak FROM x) "
        f"SELECT node, gkey, b, {', '.join(cols)} FROM y GROUP BY node, gkey, b"
    )
    if point:
        sql = _point_wrap(sql, EVENT_BASES)
    return store.query(sql, [_anchor_us(anchor), *warn_params,
                             lo - timedelta(hours=WARN_STREAK_H), hi, *params])


def telemetry_buckets(store: Store, lo: datetime, hi: datetime, anchor: datetime,
                      per_gpu: bool, point: bool = False) -> pl.DataFrame:
    """Counter increments and gauge aggregates per (node, GPU, hour); ``lo`` should start a day
    before the first bucket wanted, so the first increment has a previous value. Counters need
    their previous value (a window over each series); gauges are aggregated straight from the
    samples, in a second query."""
    names = [m for ms in COUNTER_METRICS.values() for m in ms]
    grps = [g for g, ms in COUNTER_METRICS.items() for _ in ms]
    inc = "CASE WHEN d IS NULL THEN 0 WHEN d >= 0 THEN d ELSE vmax END"
    cols = [f"coalesce(sum(CASE WHEN {inc} >= {COUNTER_NOISE_FLOOR.get(name, 0.0)} THEN {inc} "
            f"ELSE 0 END) FILTER (WHERE grp = '{name}'), 0) AS {name}"
            for name in COUNTER_METRICS]
    gkey = "coalesce(CAST(gpu AS VARCHAR), '')" if per_gpu else "''"
    sql = f"""
        WITH m AS (SELECT unnest(?::VARCHAR[]) AS metric, unnest(?::VARCHAR[]) AS grp),
        h AS (
            SELECT t.node, t.gpu, t.metric, any_value(m.grp) AS grp, {_bucket_sql('t.ts')} AS b,
                   max(t.value) AS vmax
            FROM telemetry t JOIN m ON t.metric = m.metric
            WHERE t.ts >= ? AND t.ts < ? AND t.node IS NOT NULL
            GROUP BY t.node, t.gpu, t.metric, b
        ), c AS (
            SELECT *, vmax - lag(vmax) OVER (PARTITION BY node, gpu, metric ORDER BY b) AS d
            FROM h
        )
        SELECT node, {gkey} AS gkey, b, {', '.join(cols)} FROM c GROUP BY ALL
    """
    params = [names, grps, _anchor_us(anchor), lo, hi]
    if point:
        counters = [b for b in TELEMETRY_BASES if b.name in COUNTER_METRICS]
        inc_frame = store.query(_point_wrap(sql, counters), params)
        gauges = _telemetry_gauges_point(store, lo, hi, anchor, per_gpu)
        return inc_frame.join(gauges, on=["node", "gkey"], how="full", coalesce=True)
    return store.query(sql, params).join(
        _telemetry_gauges(store, lo, hi, anchor, per_gpu), on=["node", "gkey", "b"], how="full",
        coalesce=True,
    ).fill_null(0)


def _telemetry_gauges(store: Store, lo: datetime, hi: datetime, anchor: datetime,
                      per_gpu: bool) -> pl.DataFrame:
    """Hourly gauge aggregates (max / sum / samples of each gauge, HW-throttled samples)."""
    gauge = {m: g for g, ms in GAUGE_METRICS.items() for m in ms}
    cols = ["count(*) FILTER (WHERE list_contains(?::VARCHAR[], metric) AND "
            "(CAST(value AS BIGINT) & ?) != 0) AS throttle_hw"]
    params: list[object] = [list(THROTTLE_METRICS), THROTTLE_HW_MASK]
    for g, ms in GAUGE_METRICS.items():
        cond = "list_contains(?::VARCHAR[], metric)"
        cols += [f"coalesce(max(value) FILTER (WHERE {cond}), 0) AS {g}_max",
                 f"coalesce(sum(value) FILTER (WHERE {cond}), 0) AS {g}_sum",
                 f"count(*) FILTER (WHERE {cond}) AS {g}_n"]
        params += [list(ms)] * 3
    gkey = "coalesce(CAST(gpu AS VARCHAR), '')" if per_gpu else "''"
    sql = f"""
        SELECT node, {gkey} AS gkey, {_bucket_sql('ts')} AS b, {', '.join(cols)}
        FROM telemetry
        WHERE ts >= ? AND ts < ? AND node IS NOT NULL AND list_contains(?::VARCHAR[], metric)
        GROUP BY ALL
    """
    return store.query(sql, [_anchor_us(anchor), *params, lo, hi,
                             [*gauge, *THROTTLE_METRICS]])


def _telemetry_gauges_point(store: Store, lo: datetime, hi: datetime, as_of: datetime,
                            per_gpu: bool) -> pl.DataFrame:
    """Gauge windows as of ``as_of`` straight from the samples: a window of ``w`` buckets
    anchored at ``as_of`` is exactly ``ts >= as_of - w h``."""
    src = {"temp_max": ("temp", "max(t.value)"), "temp_sum": ("temp", "sum(t.value)"),
           "temp_n": ("temp", "count(*)"), "throttle_hw": ("throttle", "count(*)")}
    aggs: list[str] = []
    agg_params: list[object] = []
    for base in TELEMETRY_BASES:
        if base.name not in src:
            continue
        grp, expr = src[base.name]
        cond, cond_params = f"m.grp = '{grp}'", []
        if base.name == "throttle_hw":
            cond += " AND (CAST(t.value AS BIGINT) & ?) != 0"
            cond_params = [THROTTLE_HW_MASK]
        for w in base.windows:
            fn, arg = expr.split("(", 1)
            aggs.append(f"CAST(coalesce({fn}({arg} FILTER (WHERE {cond} AND t.ts >= "
                        f"?::TIMESTAMP - to_hours({int(w)})), 0) AS FLOAT) "
                        f"AS {window_name(base.name, w)}")
            agg_params += [*cond_params, as_of]
    gkey = "coalesce(CAST(t.gpu AS VARCHAR), '')" if per_gpu else "''"
    groups = {**GAUGE_METRICS, "throttle": THROTTLE_METRICS}
    sql = f"""
        WITH m AS (SELECT unnest(?::VARCHAR[]) AS metric, unnest(?::VARCHAR[]) AS grp)
        SELECT t.node, {gkey} AS gkey, {', '.join(aggs)}
        FROM telemetry t JOIN m ON t.metric = m.metric
        WHERE t.ts >= ? AND t.ts < ? AND t.node IS NOT NULL GROUP BY ALL
    """
    return store.query(sql, [
        [x for ms in groups.values() for x in ms], [g for g, ms in groups.items() for _ in ms],
        *agg_params, lo, hi,
    ])


def job_buckets(store: Store, lo: datetime, hi: datetime, anchor: datetime) -> pl.DataFrame:
    sql = f"""
        WITH j AS (
            SELECT unnest(nodes) AS node, "end" AS ts, state,
                   coalesce(n_nodes, len(nodes)) AS n_nodes
            FROM jobs WHERE "end" >= ? AND "end" < ? AND nodes IS NOT NULL
        )
        SELECT node, '' AS gkey, {_bucket_sql('ts')} AS b,
               count(*) FILTER (WHERE state LIKE 'NODE_FAIL%' AND n_nodes <= 1) AS node_fail_single,
               count(*) FILTER (WHERE state LIKE 'NODE_FAIL%' AND n_nodes > 1) AS node_fail_multi,
               count(*) FILTER (WHERE state LIKE 'FAILED%') AS jobs_failed
        FROM j GROUP BY ALL
    """
    return store.query(sql, [lo, hi, _anchor_us(anchor)])


def attribution_buckets(store: Store, lo: datetime, hi: datetime,
                        anchor: datetime) -> pl.DataFrame:
    sql = f"""
        SELECT node, '' AS gkey, {_bucket_sql('"end"')} AS b, count(*) AS attr_any,
               count(*) FILTER (WHERE list_contains(?::VARCHAR[], cause)) AS attr_hw
        FROM attributions WHERE "end" >= ? AND "end" < ? AND node IS NOT NULL GROUP BY ALL
    """
    return store.query(sql, [_anchor_us(anchor), list(HARDWARE_CAUSES), lo, hi])


def failure_buckets(episodes: pl.DataFrame, anchor: datetime, per_gpu: bool) -> pl.DataFrame:
    gkey = pl.col("gpu").fill_null("") if per_gpu else pl.lit("")
    return (
        episodes.select(
            "node", gkey.alias("gkey"),
            ((pl.col("ts") - pl.lit(anchor)).dt.total_microseconds() // HOUR_US).alias("b"),
        )
        .group_by("node", "gkey", "b")
        .agg(pl.len().cast(pl.Int64).alias("fail"))
    )


TELEMETRY_WINDOW_H = max(w for b in TELEMETRY_BASES for w in b.windows)


def load_buckets(store: Store, lo: datetime, hi: datetime, anchor: datetime, *,
                 per_gpu: bool, telemetry_lo: datetime | None = None, point: bool = False,
                 ) -> tuple[dict[str, pl.DataFrame], pl.DataFrame]:
    """All sparse hourly frames for buckets in ``[lo, hi)`` and the failure episodes behind them.

    ``telemetry_lo`` lets a point evaluation read telemetry only as far back as its longest
    window needs; a day more is read so the first counter increment has a previous value."""
    tel_lo = max(lo, telemetry_lo) if telemetry_lo is not None else lo
    episodes = episodes_from_events(target_events(store, lo - HOUR, hi))
    episodes = episodes.filter(pl.col("ts") >= lo)
    frames = {
        "events": event_buckets(store, lo, hi, anchor, per_gpu, point),
        "telemetry": telemetry_buckets(store, tel_lo - timedelta(days=1), hi, anchor, per_gpu,
                                       point),
        "jobs": job_buckets(store, lo, hi, anchor),
        "attributions": attribution_buckets(store, lo, hi, anchor),
        "failures": failure_buckets(episodes, anchor, per_gpu),
    }
    lo_b = int((lo - anchor) / HOUR)
    frames = {k: f.filter(pl.col("b") >= lo_b) if "b" in f.columns else f
              for k, f in frames.items()}
    return frames, episodes


def node_universe(store: Store, lo: datetime, hi: datetime) -> list[str]:
    """Every node seen in the period (events, telemetry, inventory, jobs), sorted."""
    sql = """
        SELECT DISTINCT node FROM (
            SELECT node FROM events WHERE ts >= ? AND ts < ?
            UNION ALL SELECT node FROM telemetry WHERE ts >= ? AND ts < ?
            UNION ALL SELECT node FROM gpus
            UNION ALL SELECT unnest(nodes) AS node FROM jobs WHERE "end" >= ? AND start < ?
        ) WHERE node IS NOT NULL ORDER BY node
    """
    return store.query(sql, [lo, hi, lo, hi, lo, hi])["node"].to_list()


def _hot(expr: pl.Expr) -> pl.Expr:
    return (expr.cast(pl.Float64) - TEMP_NORMAL_C).clip(lower_bound=0.0).fill_nan(0.0).fill_null(
        0.0).cast(pl.Float32)


def _derive(frame: pl.DataFrame) -> pl.DataFrame:
    """Derived columns: temperature excursions, and two warning features that do not depend on
    the warning's kind (so that a rarely seen kind still counts): how many distinct kinds warned
    in the last 7 days, and the escalation of the last 6 h over the 18 h before (in warnings per
    hour, ``warn_6h / 6 - (warn_24h - warn_6h) / 18``)."""
    kinds = sum((pl.col(c) > 0).cast(pl.Float32) for c in WARN_KIND_COLUMNS)
    return frame.with_columns(
        *(_hot(pl.col(src)).alias(name) for name, src in _TEMP_HOT.items()),
        _hot(pl.col("temp_sum_24h") / pl.col("temp_n_24h")).alias("temp_hot_mean_24h"),
        kinds.alias("warn_kinds_7d"),
        (pl.col("warn_6h") / 6.0 - (pl.col("warn_24h") - pl.col("warn_6h")) / 18.0)
        .cast(pl.Float32).alias("warn_escalation"),
    )


# -- training: the dense node x hour grid ---------------------------------------------------------

def floor_hour(ts: datetime) -> datetime:
    return ts.replace(minute=0, second=0, microsecond=0)


class FeatureGrid:
    """Node x hour feature grid over ``[start, end)``; rows at ``start + t h`` for ``t = 0..T``.

    Row ``t`` sees buckets ``< t``; its label says whether a failure episode starts in
    ``[t, t + horizon)``. Rows whose label window runs past ``end`` are *censored*
    (``labelable`` is False): their future is not in the data yet.
    """

    def __init__(self, store: Store, start: datetime, end: datetime, *,
                 horizon_h: float) -> None:
        self.start = floor_hour(start)
        self.T = max(1, int(np.ceil((end - self.start) / HOUR)))
        self.end = self.start + self.T * HOUR
        self.horizon = max(1, int(np.ceil(horizon_h)))
        self.nodes = node_universe(store, self.start, self.end)
        self.frames, self.episodes = load_buckets(store, self.start, self.end, self.start,
                                                  per_gpu=False)
        self._index = pl.DataFrame({"node": self.nodes,
                                    "ni": np.arange(len(self.nodes), dtype=np.int64)})
        self._coords: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        fail = self._dense(Base("fail", "failures", ()))
        csum = np.zeros((len(self.nodes), self.T + 1))
        np.cumsum(fail, axis=1, out=csum[:, 1:])
        ahead = np.minimum(np.arange(self.T + 1) + self.horizon, self.T)
        self.labels = (csum[:, ahead] - csum) > 0
        self.labelable = np.arange(self.T + 1) + self.horizon <= self.T
        self._fail = fail

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.nodes), self.T + 1

    def row_times(self) -> np.ndarray:
        return np.datetime64(self.start, "us") + np.arange(self.T + 1) * np.timedelta64(1, "h")

    def _dense(self, base: Base) -> np.ndarray:
        frame = self.frames[base.source]
        if base.source not in self._coords:
            idx = frame.select("node", "b").join(self._index, on="node", how="left")
            ni = idx["ni"].fill_null(-1).to_numpy()
            b = idx["b"].to_numpy()
            self._coords[base.source] = (ni, b)
        ni, b = self._coords[base.source]
        ok = (ni >= 0) & (b >= 0) & (b < self.T)
        values = frame[base.name].cast(pl.Float64).to_numpy()
        if base.agg == "max":
            dense = np.zeros((len(self.nodes), self.T), dtype=np.float64)
            np.maximum.at(dense, (ni[ok], b[ok]), values[ok])
            return dense
        flat = np.bincount(ni[ok] * self.T + b[ok], weights=values[ok],
                           minlength=len(self.nodes) * self.T)
        return flat.reshape(len(self.nodes), self.T)

    def _windows(self, dense: np.ndarray, w: int, agg: str,
                 sel: dict[str, tuple[np.ndarray, np.ndarray]],
                 csum: np.ndarray | None) -> dict[str, np.ndarray]:
        """The ``w``-hour window feature at each selection's flat row indices of the
        ``(nodes, T + 1)`` grid: row ``t`` aggregates buckets ``[t - w, t)``. Sums come from the
        base's prefix sums ``csum`` (one per base, shared by its windows), gathered only where
        rows are selected; maxima from one running maximum."""
        if agg == "max":
            out = np.zeros((dense.shape[0], self.T + 1), dtype=np.float32)
            out[:, 1:] = maximum_filter1d(dense, size=w, axis=1, origin=(w - 1) // 2,
                                          mode="constant", cval=0.0)
            return {k: out.ravel()[idx] for k, (idx, _) in sel.items()}
        assert csum is not None
        flat = csum.ravel()
        res = {}
        for k, (idx, ti) in sel.items():
            back = idx - np.minimum(ti, w)
            res[k] = (flat[idx] - flat[back]).astype(np.float32)
        return res

    def _hours_since_fail(self) -> np.ndarray:
        pos = np.where(self._fail > 0, np.arange(self.T)[None, :], -1)
        last = np.maximum.accumulate(pos, axis=1)
        out = np.full((len(self.nodes), self.T + 1), HOURS_SINCE_CAP, dtype=np.float32)
        t = np.arange(1, self.T + 1)[None, :]
        prev = last[:, :]
        hs = np.where(prev >= 0, t - prev, HOURS_SINCE_CAP)
        out[:, 1:] = np.minimum(hs, HOURS_SINCE_CAP)
        return out

    def table(self, masks: dict[str, np.ndarray]) -> dict[str, pl.DataFrame]:
        """The feature rows selected by each boolean ``(nodes, T + 1)`` mask, in one pass."""
        sel = {k: np.flatnonzero(m.ravel()) for k, m in masks.items()}
        cols: dict[str, list[pl.Series]] = {k: [] for k in masks}
        at = {k: (idx, idx % (self.T + 1)) for k, idx in sel.items()}
        for base in BASES:
            dense = self._dense(base)
            csum = None
            if base.agg == "sum":
                csum = np.zeros((dense.shape[0], self.T + 1))
                np.cumsum(dense, axis=1, out=csum[:, 1:])
            for w in base.windows:
                for k, values in self._windows(dense, w, base.agg, at, csum).items():
                    cols[k].append(pl.Series(window_name(base.name, w), values))
            del dense, csum
        hs = self._hours_since_fail().ravel()
        labels = self.labels.ravel()
        times = self.row_times()
        node_arr = pl.Series("node", self.nodes, dtype=pl.String)
        out = {}
        for k, idx in sel.items():
            ni, ti = np.divmod(idx, self.T + 1)
            frame = pl.DataFrame([
                node_arr.gather(ni), pl.Series("ts", times[ti]),
                pl.Series("label", labels[idx].astype(np.int8)), *cols.pop(k),
                pl.Series("hours_since_fail", hs[idx]),
            ])
            out[k] = _derive(frame).select("node", "ts", "label", *FEATURES)
        return out


# -- prediction: one row per node and per GPU as of a time ----------------------------------------

def _window_aggs(frame: pl.DataFrame, bases: Sequence[Base]) -> list[pl.Expr]:
    exprs = []
    for base in bases:
        for w in base.windows:
            col = pl.col(base.name).filter(pl.col("b") >= -w)
            agg = col.max() if base.agg == "max" else col.sum()
            exprs.append(agg.fill_null(0).cast(pl.Float32).alias(window_name(base.name, w)))
    return exprs


def point_features(store: Store, as_of: datetime) -> pl.DataFrame:
    """Feature rows as of ``as_of``: one per node (``gpu`` null) and one per GPU."""
    lo = as_of - MAX_WINDOW_H * HOUR
    frames, _ = load_buckets(store, lo, as_of, as_of, per_gpu=True,
                             telemetry_lo=as_of - TELEMETRY_WINDOW_H * HOUR, point=True)
    keyed = []
    for source, frame in frames.items():
        if "b" not in frame.columns:  # already aggregated in DuckDB
            keyed.append(frame)
            continue
        bases = [b for b in BASES if b.source == source]
        aggs = _window_aggs(frame, bases)
        if source == "failures":
            aggs.append((-pl.col("b").max()).cast(pl.Float32).alias("hours_since_fail"))
        keyed.append(frame.group_by("node", "gkey").agg(aggs))
    per_key = keyed[0]
    for f in keyed[1:]:
        per_key = per_key.join(f, on=["node", "gkey"], how="full", coalesce=True)
    sums = [window_name(b.name, w) for b in BASES for w in b.windows if b.agg == "sum"]
    maxes = [window_name(b.name, w) for b in BASES for w in b.windows if b.agg == "max"]
    per_key = per_key.with_columns(pl.col(sums + maxes).fill_null(0))
    nodes = pl.DataFrame({"node": node_universe(store, lo, as_of)}).vstack(
        per_key.select("node")).unique()
    node_rows = nodes.join(
        per_key.group_by("node").agg(pl.col(sums).sum(), pl.col(maxes).max(),
                                     pl.col("hours_since_fail").min()),
        on="node", how="left",
    ).with_columns(pl.lit(None, pl.String).alias("gpu"))
    inventory = store.query(
        "SELECT DISTINCT node, CAST(gpu_index AS VARCHAR) AS gpu FROM gpus "
        "WHERE gpu_index IS NOT NULL AND node IS NOT NULL"
    )
    gpus = pl.concat([
        inventory, per_key.filter(pl.col("gkey") != "").select("node", pl.col("gkey").alias("gpu")),
    ]).unique()
    own = per_key.filter(pl.col("gkey") != "").rename({"gkey": "gpu"})
    wide = per_key.filter(pl.col("gkey") == "").drop("gkey")
    gpu_rows = gpus.join(own, on=["node", "gpu"], how="left").join(
        wide, on="node", how="left", suffix="__n")
    gpu_rows = gpu_rows.with_columns(
        *[(pl.col(c).fill_null(0) + pl.col(f"{c}__n").fill_null(0)).alias(c) for c in sums],
        *[pl.max_horizontal(pl.col(c).fill_null(0), pl.col(f"{c}__n").fill_null(0)).alias(c)
          for c in maxes],
        pl.min_horizontal("hours_since_fail", "hours_since_fail__n").alias("hours_since_fail"),
    ).select(node_rows.columns)
    rows = pl.concat([node_rows, gpu_rows], how="vertical_relaxed").with_columns(
        pl.col(sums + maxes).fill_null(0).cast(pl.Float32),
        pl.col("hours_since_fail").fill_null(HOURS_SINCE_CAP).clip(upper_bound=HOURS_SINCE_CAP)
        .cast(pl.Float32),
    )
    return _derive(rows).select("node", "gpu", *FEATURES).sort("node", "gpu", nulls_last=False)

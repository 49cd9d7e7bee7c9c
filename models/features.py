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
from datetime import datetime, timedelta

import numpy as np
import polars as pl
from scipy.ndimage import maximum_filter1d

from faultlens.ingest.store import Store
from faultlens.models.feature_catalog import (
    BASES,
    COUNTER_METRICS,
    COUNTER_NOISE_FLOOR,
    EVENT_BASES,
    FEATURES,
    GAUGE_METRICS,
    HOUR,
    HOUR_US,
    HOURS_SINCE_CAP,
    MAX_WINDOW_H,
    TELEMETRY_BASES,
    TEMP_HOT,
    TEMP_NORMAL_C,
    THROTTLE_HW_MASK,
    THROTTLE_METRICS,
    WARN_KIND_COLUMNS,
    WARN_KINDS,
    WARN_STREAK_H,
    WARN_XIDS,
    Base,
    window_name,
)
from faultlens.models.target import (
    HARDWARE_CAUSES,
    TARGET_EVENT_SQL,
    episodes_from_events,
    target_event_params,
    target_events,
)

log = logging.getLogger(__name__)

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
            aggs.append(
                f"CAST(coalesce({fn}({base.name}) FILTER (WHERE b >= -{int(w)}), 0) "
                f"AS FLOAT) AS {window_name(base.name, w)}"
            )
    return f"SELECT node, gkey, {', '.join(aggs)} FROM ({sql}) GROUP BY node, gkey"


def _in_nodes(col: str, nodes: Sequence[str] | None) -> tuple[str, list[object]]:
    """``AND col IN nodes`` and its parameter (nothing when ``nodes`` is None: every node). The
    node subset lets training build its grid a group of nodes at a time (``models.chunked``)."""
    if nodes is None:
        return "", []
    return f" AND list_contains(?::VARCHAR[], {col})", [list(nodes)]


def _warn_sql() -> tuple[str, list[object]]:
    """SQL predicate (events alias e) for a hardware warning, and its parameters."""
    sql = (
        f"((list_contains(?::VARCHAR[], e.kind) OR (e.kind = 'xid' AND "
        f"list_contains(?::INTEGER[], e.code))) AND NOT {TARGET_EVENT_SQL})"
    )
    return sql, [list(WARN_KINDS), list(WARN_XIDS), *target_event_params()]


# Per-warning values over the same GPU's (the node's, for host warnings) warnings in the
# ``WARN_STREAK_H`` hours up to it (window ``w`` of ``event_buckets``), maxed per hour bucket: how
# many there are, and the hours since the first of them.
_PER_WARNING = {
    "warn_streak": "sum(CAST(warn AS INTEGER)) OVER w",
    "warn_span": "(epoch(ts) - epoch(min(CASE WHEN warn THEN ts END) OVER w)) / 3600.0",
}


def event_buckets(
    store: Store,
    lo: datetime,
    hi: datetime,
    anchor: datetime,
    per_gpu: bool,
    point: bool = False,
    nodes: Sequence[str] | None = None,
) -> pl.DataFrame:
    """Event counts per (node, GPU key, hour). Events are read from ``WARN_STREAK_H`` before
    ``lo`` so that a warning streak sees its history; buckets before ``lo`` are dropped by the
    caller."""
    cols, params = [], []
    for b in EVENT_BASES:
        if b.name in _PER_WARNING:
            cols.append(f"coalesce(max({b.name}), 0) AS {b.name}")
            continue
        cols.append(f"count(*) FILTER (WHERE {b.cond}) AS {b.name}")
        params.extend(b.params)
    warn, warn_params = _warn_sql()
    per_warning = ", ".join(f"CASE WHEN warn THEN {v} END AS {k}" for k, v in _PER_WARNING.items())
    in_nodes, node_params = _in_nodes("e.node", nodes)
    gpu = _gkey_events(True)
    sql = (
        f"WITH x AS (SELECT e.node, {_gkey_events(per_gpu)} AS gkey, {gpu} AS gpu_key, "
        f"{_bucket_sql('e.ts')} AS b, e.ts, e.kind, e.code, e.severity, {warn} AS warn "
        "FROM events e LEFT JOIN (SELECT node, pci_bus_id, min(gpu_index) AS gi FROM gpus "
        "WHERE pci_bus_id IS NOT NULL GROUP BY ALL) g ON g.node = e.node AND g.pci_bus_id = e.gpu "
        f"WHERE e.ts >= ? AND e.ts < ? AND e.node IS NOT NULL{in_nodes}), "
        f"y AS (SELECT *, {per_warning} FROM x WINDOW w AS (PARTITION BY node, gpu_key "
        f"ORDER BY ts RANGE BETWEEN INTERVAL {WARN_STREAK_H} HOURS PRECEDING AND CURRENT ROW)) "
        f"SELECT node, gkey, b, {', '.join(cols)} FROM y GROUP BY node, gkey, b"
    )
    if point:
        sql = _point_wrap(sql, EVENT_BASES)
    return store.query(
        sql,
        [
            _anchor_us(anchor),
            *warn_params,
            lo - timedelta(hours=WARN_STREAK_H),
            hi,
            *node_params,
            *params,
        ],
    )


def telemetry_buckets(
    store: Store,
    lo: datetime,
    hi: datetime,
    anchor: datetime,
    per_gpu: bool,
    point: bool = False,
    nodes: Sequence[str] | None = None,
) -> pl.DataFrame:
    """Counter increments and gauge aggregates per (node, GPU, hour); ``lo`` should start a day
    before the first bucket wanted, so the first increment has a previous value. Counters need
    their previous value (a window over each series); gauges are aggregated straight from the
    samples, in a second query."""
    names = [m for ms in COUNTER_METRICS.values() for m in ms]
    grps = [g for g, ms in COUNTER_METRICS.items() for _ in ms]
    inc = "CASE WHEN d IS NULL THEN 0 WHEN d >= 0 THEN d ELSE vmax END"
    cols = [
        f"coalesce(sum(CASE WHEN {inc} >= {COUNTER_NOISE_FLOOR.get(name, 0.0)} THEN {inc} "
        f"ELSE 0 END) FILTER (WHERE grp = '{name}'), 0) AS {name}"
        for name in COUNTER_METRICS
    ]
    gkey = "coalesce(CAST(gpu AS VARCHAR), '')" if per_gpu else "''"
    in_nodes, node_params = _in_nodes("t.node", nodes)
    sql = f"""
        WITH m AS (SELECT unnest(?::VARCHAR[]) AS metric, unnest(?::VARCHAR[]) AS grp),
        h AS (
            SELECT t.node, t.gpu, t.metric, any_value(m.grp) AS grp, {_bucket_sql("t.ts")} AS b,
                   max(t.value) AS vmax
            FROM telemetry t JOIN m ON t.metric = m.metric
            WHERE t.ts >= ? AND t.ts < ? AND t.node IS NOT NULL{in_nodes}
            GROUP BY t.node, t.gpu, t.metric, b
        ), c AS (
            SELECT *, vmax - lag(vmax) OVER (PARTITION BY node, gpu, metric ORDER BY b) AS d
            FROM h
        )
        SELECT node, {gkey} AS gkey, b, {", ".join(cols)} FROM c GROUP BY ALL
    """
    params = [names, grps, _anchor_us(anchor), lo, hi, *node_params]
    if point:
        counters = [b for b in TELEMETRY_BASES if b.name in COUNTER_METRICS]
        inc_frame = store.query(_point_wrap(sql, counters), params)
        gauges = _telemetry_gauges_point(store, lo, hi, anchor, per_gpu)
        return inc_frame.join(gauges, on=["node", "gkey"], how="full", coalesce=True)
    return (
        store.query(sql, params)
        .join(
            _telemetry_gauges(store, lo, hi, anchor, per_gpu, nodes),
            on=["node", "gkey", "b"],
            how="full",
            coalesce=True,
        )
        .fill_null(0)
    )


def _telemetry_gauges(
    store: Store,
    lo: datetime,
    hi: datetime,
    anchor: datetime,
    per_gpu: bool,
    nodes: Sequence[str] | None = None,
) -> pl.DataFrame:
    """Hourly gauge aggregates (max / sum / samples of each gauge, HW-throttled samples)."""
    gauge = {m: g for g, ms in GAUGE_METRICS.items() for m in ms}
    cols = [
        "count(*) FILTER (WHERE list_contains(?::VARCHAR[], metric) AND "
        "(CAST(value AS BIGINT) & ?) != 0) AS throttle_hw"
    ]
    params: list[object] = [list(THROTTLE_METRICS), THROTTLE_HW_MASK]
    for g, ms in GAUGE_METRICS.items():
        cond = "list_contains(?::VARCHAR[], metric)"
        cols += [
            f"coalesce(max(value) FILTER (WHERE {cond}), 0) AS {g}_max",
            f"coalesce(sum(value) FILTER (WHERE {cond}), 0) AS {g}_sum",
            f"count(*) FILTER (WHERE {cond}) AS {g}_n",
        ]
        params += [list(ms)] * 3
    gkey = "coalesce(CAST(gpu AS VARCHAR), '')" if per_gpu else "''"
    in_nodes, node_params = _in_nodes("node", nodes)
    sql = f"""
        SELECT node, {gkey} AS gkey, {_bucket_sql("ts")} AS b, {", ".join(cols)}
        FROM telemetry
        WHERE ts >= ? AND ts < ? AND node IS NOT NULL AND list_contains(?::VARCHAR[], metric)
          {in_nodes}
        GROUP BY ALL
    """
    return store.query(
        sql, [_anchor_us(anchor), *params, lo, hi, [*gauge, *THROTTLE_METRICS], *node_params]
    )


def _telemetry_gauges_point(
    store: Store, lo: datetime, hi: datetime, as_of: datetime, per_gpu: bool
) -> pl.DataFrame:
    """Gauge windows as of ``as_of`` straight from the samples: a window of ``w`` buckets
    anchored at ``as_of`` is exactly ``ts >= as_of - w h``."""
    src = {
        "temp_max": ("temp", "max(t.value)"),
        "temp_sum": ("temp", "sum(t.value)"),
        "temp_n": ("temp", "count(*)"),
        "throttle_hw": ("throttle", "count(*)"),
    }
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
            aggs.append(
                f"CAST(coalesce({fn}({arg} FILTER (WHERE {cond} AND t.ts >= "
                f"?::TIMESTAMP - to_hours({int(w)})), 0) AS FLOAT) "
                f"AS {window_name(base.name, w)}"
            )
            agg_params += [*cond_params, as_of]
    gkey = "coalesce(CAST(t.gpu AS VARCHAR), '')" if per_gpu else "''"
    groups = {**GAUGE_METRICS, "throttle": THROTTLE_METRICS}
    sql = f"""
        WITH m AS (SELECT unnest(?::VARCHAR[]) AS metric, unnest(?::VARCHAR[]) AS grp)
        SELECT t.node, {gkey} AS gkey, {", ".join(aggs)}
        FROM telemetry t JOIN m ON t.metric = m.metric
        WHERE t.ts >= ? AND t.ts < ? AND t.node IS NOT NULL GROUP BY ALL
    """
    return store.query(
        sql,
        [
            [x for ms in groups.values() for x in ms],
            [g for g, ms in groups.items() for _ in ms],
            *agg_params,
            lo,
            hi,
        ],
    )


def job_buckets(
    store: Store,
    lo: datetime,
    hi: datetime,
    anchor: datetime,
    nodes: Sequence[str] | None = None,
) -> pl.DataFrame:
    in_nodes, node_params = _in_nodes("node", nodes)
    sql = f"""
        WITH j AS (
            SELECT unnest(nodes) AS node, "end" AS ts, state,
                   coalesce(n_nodes, len(nodes)) AS n_nodes
            FROM jobs WHERE "end" >= ? AND "end" < ? AND nodes IS NOT NULL
        )
        SELECT node, '' AS gkey, {_bucket_sql("ts")} AS b,
               count(*) FILTER (WHERE state LIKE 'NODE_FAIL%' AND n_nodes <= 1) AS node_fail_single,
               count(*) FILTER (WHERE state LIKE 'NODE_FAIL%' AND n_nodes > 1) AS node_fail_multi,
               count(*) FILTER (WHERE state LIKE 'FAILED%') AS jobs_failed
        FROM j WHERE true{in_nodes} GROUP BY ALL
    """
    return store.query(sql, [lo, hi, _anchor_us(anchor), *node_params])


def attribution_buckets(
    store: Store,
    lo: datetime,
    hi: datetime,
    anchor: datetime,
    nodes: Sequence[str] | None = None,
) -> pl.DataFrame:
    in_nodes, node_params = _in_nodes("node", nodes)
    sql = f"""
        SELECT node, '' AS gkey, {_bucket_sql('"end"')} AS b, count(*) AS attr_any,
               count(*) FILTER (WHERE list_contains(?::VARCHAR[], cause)) AS attr_hw
        FROM attributions WHERE "end" >= ? AND "end" < ? AND node IS NOT NULL{in_nodes}
        GROUP BY ALL
    """
    return store.query(sql, [_anchor_us(anchor), list(HARDWARE_CAUSES), lo, hi, *node_params])


def failure_buckets(episodes: pl.DataFrame, anchor: datetime, per_gpu: bool) -> pl.DataFrame:
    gkey = pl.col("gpu").fill_null("") if per_gpu else pl.lit("")
    return (
        episodes.select(
            "node",
            gkey.alias("gkey"),
            ((pl.col("ts") - pl.lit(anchor)).dt.total_microseconds() // HOUR_US).alias("b"),
        )
        .group_by("node", "gkey", "b")
        .agg(pl.len().cast(pl.Int64).alias("fail"))
    )


TELEMETRY_WINDOW_H = max(w for b in TELEMETRY_BASES for w in b.windows)


def load_buckets(
    store: Store,
    lo: datetime,
    hi: datetime,
    anchor: datetime,
    *,
    per_gpu: bool,
    telemetry_lo: datetime | None = None,
    point: bool = False,
    nodes: Sequence[str] | None = None,
) -> tuple[dict[str, pl.DataFrame], pl.DataFrame]:
    """All sparse hourly frames for buckets in ``[lo, hi)`` and the failure episodes behind them.

    ``telemetry_lo`` lets a point evaluation read telemetry only as far back as its longest
    window needs; a day more is read so the first counter increment has a previous value.
    ``nodes``: only these nodes' rows (None: every node)."""
    tel_lo = max(lo, telemetry_lo) if telemetry_lo is not None else lo
    episodes = episodes_from_events(target_events(store, lo - HOUR, hi))
    episodes = episodes.filter(pl.col("ts") >= lo)
    if nodes is not None:
        episodes = episodes.filter(pl.col("node").is_in(list(nodes)))
    frames = {
        # events: hourly buckets, windowed in polars (``point_features``) even for a point: on
        # 220k buckets of 1,024 keys, DuckDB's FILTER-per-window wrap took 4-5 s, polars 0.8 s
        # (bench.bench_run_history, 5M events, load 23), with the same numbers
        "events": event_buckets(store, lo, hi, anchor, per_gpu, False, nodes),
        "telemetry": telemetry_buckets(
            store, tel_lo - timedelta(days=1), hi, anchor, per_gpu, point, nodes
        ),
        "jobs": job_buckets(store, lo, hi, anchor, nodes),
        "attributions": attribution_buckets(store, lo, hi, anchor, nodes),
        "failures": failure_buckets(episodes, anchor, per_gpu),
    }
    lo_b = int((lo - anchor) / HOUR)
    frames = {
        k: f.filter(pl.col("b") >= lo_b) if "b" in f.columns else f for k, f in frames.items()
    }
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
    return (
        (expr.cast(pl.Float64) - TEMP_NORMAL_C)
        .clip(lower_bound=0.0)
        .fill_nan(0.0)
        .fill_null(0.0)
        .cast(pl.Float32)
    )


def _derive(frame: pl.DataFrame) -> pl.DataFrame:
    """Derived columns: temperature excursions, and two warning features that do not depend on
    the warning's kind (so that a rarely seen kind still counts): how many distinct kinds warned
    in the last 7 days, and the escalation of the last 6 h over the 18 h before (in warnings per
    hour, ``warn_6h / 6 - (warn_24h - warn_6h) / 18``)."""
    kinds = sum((pl.col(c) > 0).cast(pl.Float32) for c in WARN_KIND_COLUMNS)
    return frame.with_columns(
        *(_hot(pl.col(src)).alias(name) for name, src in TEMP_HOT.items()),
        _hot(pl.col("temp_sum_24h") / pl.col("temp_n_24h")).alias("temp_hot_mean_24h"),
        kinds.alias("warn_kinds_7d"),
        (pl.col("warn_6h") / 6.0 - (pl.col("warn_24h") - pl.col("warn_6h")) / 18.0)
        .cast(pl.Float32)
        .alias("warn_escalation"),
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

    def __init__(
        self,
        store: Store,
        start: datetime,
        end: datetime,
        *,
        horizon_h: float,
        nodes: Sequence[str] | None = None,
    ) -> None:
        """``nodes``: the grid of these nodes only (a group of a chunked training run; None:
        every node seen in the period)."""
        self.start = floor_hour(start)
        self.T = max(1, int(np.ceil((end - self.start) / HOUR)))
        self.end = self.start + self.T * HOUR
        self.horizon = max(1, int(np.ceil(horizon_h)))
        self.nodes = node_universe(store, self.start, self.end) if nodes is None else sorted(nodes)
        self.frames, self.episodes = load_buckets(
            store, self.start, self.end, self.start, per_gpu=False, nodes=nodes
        )
        self._index = pl.DataFrame(
            {"node": self.nodes, "ni": np.arange(len(self.nodes), dtype=np.int64)}
        )
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

    def _dense(self, base: Base, rows: np.ndarray | None = None) -> np.ndarray:
        """The base's hourly buckets as a ``(nodes, T)`` array; with ``rows`` (sorted node
        indices), those nodes' rows only, in that order (each row's values are the same)."""
        frame = self.frames[base.source]
        if base.source not in self._coords:
            idx = frame.select("node", "b").join(self._index, on="node", how="left")
            ni = idx["ni"].fill_null(-1).to_numpy()
            b = idx["b"].to_numpy()
            self._coords[base.source] = (ni, b)
        ni, b = self._coords[base.source]
        n = len(self.nodes)
        if rows is not None:
            pos = np.full(n + 1, -1, dtype=np.int64)  # pos[-1]: an unknown node stays unknown
            pos[rows] = np.arange(rows.size)
            ni, n = pos[ni], rows.size
        ok = (ni >= 0) & (b >= 0) & (b < self.T)
        values = frame[base.name].cast(pl.Float64).to_numpy()
        if base.agg == "max":
            dense = np.zeros((n, self.T), dtype=np.float64)
            np.maximum.at(dense, (ni[ok], b[ok]), values[ok])
            return dense
        flat = np.bincount(ni[ok] * self.T + b[ok], weights=values[ok], minlength=n * self.T)
        return flat.reshape(n, self.T)

    def _windows(
        self,
        dense: np.ndarray,
        w: int,
        agg: str,
        sel: dict[str, tuple[np.ndarray, np.ndarray]],
        csum: np.ndarray | None,
    ) -> dict[str, np.ndarray]:
        """The ``w``-hour window feature at each selection's flat row indices of the
        ``(nodes, T + 1)`` grid: row ``t`` aggregates buckets ``[t - w, t)``. Sums come from the
        base's prefix sums ``csum`` (one per base, shared by its windows), gathered only where
        rows are selected; maxima from one running maximum."""
        if agg == "max":
            out = np.zeros((dense.shape[0], self.T + 1), dtype=np.float32)
            out[:, 1:] = maximum_filter1d(
                dense, size=w, axis=1, origin=(w - 1) // 2, mode="constant", cval=0.0
            )
            return {k: out.ravel()[idx] for k, (idx, _) in sel.items()}
        assert csum is not None
        flat = csum.ravel()
        res = {}
        for k, (idx, ti) in sel.items():
            back = idx - np.minimum(ti, w)
            res[k] = (flat[idx] - flat[back]).astype(np.float32)
        return res

    def _hours_since_fail(self, rows: np.ndarray | None = None) -> np.ndarray:
        fail = self._fail if rows is None else self._fail[rows]
        pos = np.where(fail > 0, np.arange(self.T)[None, :], -1)
        last = np.maximum.accumulate(pos, axis=1)
        out = np.full((fail.shape[0], self.T + 1), HOURS_SINCE_CAP, dtype=np.float32)
        t = np.arange(1, self.T + 1)[None, :]
        prev = last[:, :]
        hs = np.where(prev >= 0, t - prev, HOURS_SINCE_CAP)
        out[:, 1:] = np.minimum(hs, HOURS_SINCE_CAP)
        return out

    def table(self, masks: dict[str, np.ndarray]) -> dict[str, pl.DataFrame]:
        """The feature rows selected by each boolean ``(nodes, T + 1)`` mask, in one pass. The
        windows are computed over the nodes with a selected row only (a cross-fitting group's
        quarter of the grid costs a quarter of it), with the same values."""
        sel = {k: np.flatnonzero(m.ravel()) for k, m in masks.items()}
        cols: dict[str, list[pl.Series]] = {k: [] for k in masks}
        width = self.T + 1
        used = np.zeros(len(self.nodes), dtype=bool)
        for idx in sel.values():
            used[idx // width] = True
        rows = None if used.all() else np.flatnonzero(used)
        if rows is None:
            at = {k: (idx, idx % width) for k, idx in sel.items()}
        else:  # the selections' flat indices in the grid of ``rows`` only
            pos = np.cumsum(used) - 1
            at = {}
            for k, idx in sel.items():
                ni, ti = np.divmod(idx, width)
                at[k] = (pos[ni] * width + ti, ti)
        for base in BASES:
            dense = self._dense(base, rows)
            csum = None
            if base.agg == "sum":
                csum = np.zeros((dense.shape[0], self.T + 1))
                np.cumsum(dense, axis=1, out=csum[:, 1:])
            for w in base.windows:
                for k, values in self._windows(dense, w, base.agg, at, csum).items():
                    cols[k].append(pl.Series(window_name(base.name, w), values))
            del dense, csum
        hs = self._hours_since_fail(rows).ravel()
        labels = self.labels.ravel()
        times = self.row_times()
        node_arr = pl.Series("node", self.nodes, dtype=pl.String)
        out = {}
        for k, idx in sel.items():
            ni, ti = np.divmod(idx, self.T + 1)
            frame = pl.DataFrame(
                [
                    node_arr.gather(ni),
                    pl.Series("ts", times[ti]),
                    pl.Series("label", labels[idx].astype(np.int8)),
                    *cols.pop(k),
                    pl.Series("hours_since_fail", hs[at[k][0]]),
                ]
            )
            out[k] = _derive(frame).select("node", "ts", "label", *FEATURES)
        return out


def stack_features(frames: list[pl.DataFrame]) -> np.ndarray:
    """The ``FEATURES`` columns of ``frames``, one under the other, as one float32 array filled a
    column at a time: no whole-table temporary beside the tables and the result (the memory
    plan's budget for the sampled rows, ``models.plan``)."""
    X = np.empty((sum(f.height for f in frames), len(FEATURES)), dtype=np.float32)
    row = 0
    for f in frames:
        for j, name in enumerate(FEATURES):
            X[row : row + f.height, j] = f[name].to_numpy()
        row += f.height
    return X


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
    frames, _ = load_buckets(
        store,
        lo,
        as_of,
        as_of,
        per_gpu=True,
        telemetry_lo=as_of - TELEMETRY_WINDOW_H * HOUR,
        point=True,
    )
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
    nodes = (
        pl.DataFrame({"node": node_universe(store, lo, as_of)})
        .vstack(per_key.select("node"))
        .unique()
    )
    node_rows = nodes.join(
        per_key.group_by("node").agg(
            pl.col(sums).sum(), pl.col(maxes).max(), pl.col("hours_since_fail").min()
        ),
        on="node",
        how="left",
    ).with_columns(pl.lit(None, pl.String).alias("gpu"))
    inventory = store.query(
        "SELECT DISTINCT node, CAST(gpu_index AS VARCHAR) AS gpu FROM gpus "
        "WHERE gpu_index IS NOT NULL AND node IS NOT NULL"
    )
    gpus = pl.concat(
        [
            inventory,
            per_key.filter(pl.col("gkey") != "").select("node", pl.col("gkey").alias("gpu")),
        ]
    ).unique()
    own = per_key.filter(pl.col("gkey") != "").rename({"gkey": "gpu"})
    wide = per_key.filter(pl.col("gkey") == "").drop("gkey")
    gpu_rows = gpus.join(own, on=["node", "gpu"], how="left").join(
        wide, on="node", how="left", suffix="__n"
    )
    gpu_rows = gpu_rows.with_columns(
        *[(pl.col(c).fill_null(0) + pl.col(f"{c}__n").fill_null(0)).alias(c) for c in sums],
        *[
            pl.max_horizontal(pl.col(c).fill_null(0), pl.col(f"{c}__n").fill_null(0)).alias(c)
            for c in maxes
        ],
        pl.min_horizontal("hours_since_fail", "hours_since_fail__n").alias("hours_since_fail"),
    ).select(node_rows.columns)
    rows = pl.concat([node_rows, gpu_rows], how="vertical_relaxed").with_columns(
        pl.col(sums + maxes).fill_null(0).cast(pl.Float32),
        pl.col("hours_since_fail")
        .fill_null(HOURS_SINCE_CAP)
        .clip(upper_bound=HOURS_SINCE_CAP)
        .cast(pl.Float32),
    )
    return _derive(rows).select("node", "gpu", *FEATURES).sort("node", "gpu", nulls_last=False)

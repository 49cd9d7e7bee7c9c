"""Straggler detection and cost: which GPU or node slowed each job down, why, and what it cost.

Detection compares, within each job and time window, every GPU with its peers at the same time
(robust z-scores against the job's median and MAD across GPUs) on SM clock, temperature, power,
utilization, PCIe throughput and the clocks-throttle reasons; a GPU is a straggler only when it is
slow for ``k`` consecutive windows, so a single noisy sample never is. When most GPUs of one node
are slow for a node-level reason (link / NIC, host), the node is the straggler.

Cause labels, from the evidence: ``thermal`` (clock down with thermal throttle reasons or a hot
GPU), ``power`` (clock down at the power cap), ``clocks`` (clock down, no reason given),
``link`` (PCIe / network throughput far below the peers'), ``host`` (utilization down, clocks
normal: CPU contention, data loading).

NCCL evidence (``nccl_evidence``, per job and node): ProcessGroupNCCL watchdog-timeout bursts in
which most of the job's ranks timed out but the node's did not (the others waited for it; ranks
map to nodes through the job's widest communicator in ``nccl_ranks``), and windows in which one
of the node's ranks was the slowest in most per-rank logged steps, repeatedly. It is reported
with each straggler and turns an ambiguous node-level label (some GPUs say link, some host) into
``link``.

Cost (the what-if idea of Lin et al., OSDI'25): per job, the straggler-free step time is the job's
own median step time in windows with no straggler; in each straggling window the slowdown is
``S = step time / straggler-free step time`` and the waste ``n_gpus * hours * (1 - 1/S)``, shared
by the stragglers active in that window.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import polars as pl

from faultlens.ingest.store import Store

log = logging.getLogger(__name__)

CLOCK = "DCGM_FI_DEV_SM_CLOCK"
POWER = "DCGM_FI_DEV_POWER_USAGE"
TEMP = "DCGM_FI_DEV_GPU_TEMP"
UTIL = "DCGM_FI_DEV_GPU_UTIL"
THROTTLE = "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"
PCIE_TX = "DCGM_FI_PROF_PCIE_TX_BYTES"
PCIE_RX = "DCGM_FI_PROF_PCIE_RX_BYTES"
NVLINK_TX = "DCGM_FI_PROF_NVLINK_TX_BYTES"
REPLAY = "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"
METRICS = (CLOCK, POWER, TEMP, UTIL, THROTTLE, PCIE_TX, PCIE_RX, NVLINK_TX, REPLAY)
SHORT = {
    CLOCK: "clock",
    POWER: "power",
    TEMP: "temp",
    UTIL: "util",
    PCIE_TX: "pcie",
    NVLINK_TX: "nvlink",
    REPLAY: "replay",
}
# Floors of the robust scale, so that near-identical peers do not turn jitter into z = 50.
SCALE_FLOOR = {"clock": 15.0, "power": 10.0, "temp": 2.0, "util": 2.0, "pcie": None, "nvlink": None}
THERMAL_BITS = 0x20 | 0x40 | 0x8  # SW thermal, HW thermal, HW slowdown
POWER_BITS = 0x4 | 0x80  # SW power cap, HW power brake
NODE_CAUSES = ("link", "host")
LINK_AMBIGUOUS_SHARE = 0.25  # share of link windows at which NCCL evidence may decide "link"
CAUSE_RANK = {"thermal": 0, "power": 1, "clocks": 2, "link": 3, "host": 4}


@dataclass(frozen=True)
class DetectConfig:
    """Thresholds of the detector. ``window_s`` None: max(300 s, 5 telemetry intervals) per job."""

    window_s: float | None = None
    z: float = 4.0  # robust z-score beyond which a GPU deviates from its peers
    k: int = 3  # consecutive slow windows before a GPU is a straggler
    min_clock_drop: float = 0.04
    min_util_drop: float = 0.08
    min_pcie_drop: float = 0.25
    node_share: float = 0.5  # share of a node's GPUs slow for a node-level cause -> node straggler
    min_gpus: int = 4  # peers needed for a comparison


# -- windows of per-GPU telemetry ------------------------------------------------------------------

_WINDOWS_SQL = """
WITH j AS (
    SELECT job_id, unnest(nodes) AS node, start, "end", coalesce(n_gpus, 0) AS n_gpus
    FROM jobs
    WHERE start IS NOT NULL AND "end" IS NOT NULL AND len(nodes) >= 1
      AND (? IS NULL OR job_id = ?) AND (? IS NULL OR "end" >= ?)
),
s AS (
    SELECT j.job_id, j.start, j."end", j.n_gpus, t.node, t.gpu, t.metric, t.ts, t.value
    FROM telemetry t JOIN j ON t.node = j.node AND t.ts >= j.start AND t.ts < j."end"
    WHERE t.metric IN (SELECT unnest(?::VARCHAR[])) AND t.gpu IS NOT NULL
),
iv AS (
    SELECT job_id, epoch(max(ts) - min(ts)) / greatest(count(DISTINCT ts) - 1, 1) AS interval_s
    FROM s WHERE metric = ? GROUP BY job_id
),
win AS (
    SELECT job_id, coalesce(?, greatest(300.0, 5 * interval_s)) AS window_s FROM iv
)
SELECT s.job_id, any_value(s.start) AS start, any_value(s."end") AS "end",
       any_value(s.n_gpus) AS n_gpus, any_value(win.window_s) AS window_s, s.node, s.gpu,
       floor(epoch(s.ts - s.start) / win.window_s)::BIGINT AS w, s.metric,
       median(s.value) AS v,
       max(s.value) - min(s.value) AS spread,
       avg(CASE WHEN (s.value::BIGINT & ?) <> 0 THEN 1.0 ELSE 0.0 END) AS thermal_frac,
       avg(CASE WHEN (s.value::BIGINT & ?) <> 0 THEN 1.0 ELSE 0.0 END) AS power_frac
FROM s JOIN win USING (job_id)
GROUP BY s.job_id, s.node, s.gpu, w, s.metric
"""


def gpu_windows(
    store: Store,
    *,
    job_id: str | None = None,
    since: datetime | None = None,
    config: DetectConfig | None = None,
) -> pl.DataFrame:
    """One row per (job, node, gpu, window): window medians of each metric, wide."""
    cfg = config or DetectConfig()
    long = store.query(
        _WINDOWS_SQL,
        [
            job_id,
            job_id,
            since,
            since,
            list(METRICS),
            CLOCK,
            cfg.window_s,
            THERMAL_BITS,
            POWER_BITS,
        ],
    )
    keys = ["job_id", "node", "gpu", "w"]
    if long.height == 0:
        return pl.DataFrame()
    meta = long.group_by(keys).agg(
        pl.col("start").first(),
        pl.col("end").first(),
        pl.col("n_gpus").first(),
        pl.col("window_s").first(),
    )
    values = long.filter(pl.col("metric").is_in(list(SHORT))).with_columns(
        name=pl.col("metric").replace_strict(SHORT, default=None)
    )
    wide = values.pivot(on="name", index=keys, values="v", aggregate_function="first")
    replay = values.filter(pl.col("name") == "replay").select(*keys, replay_delta="spread")
    thr = long.filter(pl.col("metric") == THROTTLE).select(*keys, "thermal_frac", "power_frac")
    out = meta.join(wide, on=keys, how="left").join(replay, on=keys, how="left")
    out = out.join(thr, on=keys, how="left")
    for name in (*SHORT.values(), "replay_delta", "thermal_frac", "power_frac"):
        if name not in out.columns:
            out = out.with_columns(pl.lit(None, pl.Float64).alias(name))
    return out.with_columns(
        win_start=pl.col("start")
        + pl.duration(milliseconds=(pl.col("w") * pl.col("window_s") * 1000).cast(pl.Int64))
    ).sort(keys)


def peer_scores(windows: pl.DataFrame, config: DetectConfig | None = None) -> pl.DataFrame:
    """Add each metric's robust z-score against the job's GPUs in the same window (z_clock, ...)
    and the relative drop below the peers' median (drop_clock, ...)."""
    cfg = config or DetectConfig()
    grp = ["job_id", "w"]
    out = windows.with_columns(n_peers=pl.len().over(grp))
    for name, floor in SCALE_FLOOR.items():
        med = pl.col(name).median().over(grp)
        mad = (pl.col(name) - med).abs().median().over(grp)
        floor_expr = pl.lit(floor) if floor is not None else 0.05 * med.abs()
        scale = pl.max_horizontal(1.4826 * mad, floor_expr)
        out = out.with_columns(
            (pl.col(name) - med).truediv(scale).alias(f"z_{name}"),
            ((med - pl.col(name)) / med.abs()).alias(f"drop_{name}"),
            med.alias(f"med_{name}"),
        )
    return out.with_columns(
        pl.when(pl.col("n_peers") >= cfg.min_gpus).then(pl.col(f"z_{n}")).alias(f"z_{n}")
        for n in SCALE_FLOOR
    )


def label_windows(scored: pl.DataFrame, config: DetectConfig | None = None) -> pl.DataFrame:
    """A cause label per slow (GPU, window), null when the GPU keeps up with its peers."""
    cfg = config or DetectConfig()
    z = cfg.z
    low_clock = (pl.col("z_clock") < -z) & (pl.col("drop_clock") > cfg.min_clock_drop)
    thermal = low_clock & ((pl.col("thermal_frac") >= 0.5) | (pl.col("z_temp") > z))
    power = low_clock & (pl.col("power_frac") >= 0.5)
    link = (pl.col("z_pcie") < -z) & (pl.col("drop_pcie") > cfg.min_pcie_drop)
    host = (pl.col("z_util") < -z) & (pl.col("drop_util") > cfg.min_util_drop) & ~low_clock
    cause = (
        pl.when(thermal)
        .then(pl.lit("thermal"))
        .when(power)
        .then(pl.lit("power"))
        .when(low_clock)
        .then(pl.lit("clocks"))
        .when(link)
        .then(pl.lit("link"))
        .when(host)
        .then(pl.lit("host"))
    )
    return scored.with_columns(raw_cause=cause)


def _persist(frame: pl.DataFrame, key: list[str], flag: str, k: int, out: str) -> pl.DataFrame:
    """``out`` = ``flag`` and part of a run of >= ``k`` consecutive windows per ``key``."""
    frame = frame.sort([*key, "w"])
    gap = (pl.col("w") - pl.col("w").shift(1).over(key)).fill_null(1)
    prev_flag = pl.col(flag).shift(1).over(key).fill_null(False)
    new_run = (gap != 1) | (pl.col(flag) != prev_flag)
    frame = frame.with_columns(_run=new_run.cast(pl.Int64).cum_sum().over(key))
    frame = frame.with_columns(_len=pl.len().over([*key, "_run"]))
    return frame.with_columns((pl.col(flag) & (pl.col("_len") >= k)).alias(out)).drop(
        "_run", "_len"
    )


def flag_windows(labeled: pl.DataFrame, config: DetectConfig | None = None) -> pl.DataFrame:
    """Persistence and node aggregation. Adds ``unit_gpu`` (null for a node-level straggler),
    ``cause`` and ``flagged`` (straggling in this window, after persistence)."""
    cfg = config or DetectConfig()
    df = labeled.with_columns(slow=pl.col("raw_cause").is_not_null())
    node_key = ["job_id", "node", "w"]
    df = df.with_columns(
        node_gpus=pl.len().over(node_key),
        node_slow=(pl.col("raw_cause").is_in(list(NODE_CAUSES))).sum().over(node_key),
    ).with_columns(
        node_level=pl.col("raw_cause").is_in(list(NODE_CAUSES))
        & (pl.col("node_slow") >= cfg.node_share * pl.col("node_gpus"))
    )
    gpu_rows = _persist(df, ["job_id", "node", "gpu"], "slow", cfg.k, "gpu_flag")
    node = (
        df.group_by(node_key)
        .agg(node_flag_raw=pl.col("node_level").any())
        .pipe(_persist, ["job_id", "node"], "node_flag_raw", cfg.k, "node_flag")
    )
    out = gpu_rows.join(node.select(*node_key, "node_flag"), on=node_key, how="left")
    return out.with_columns(
        flagged=pl.col("gpu_flag") | pl.col("node_flag").fill_null(False),
        unit_gpu=pl.when(pl.col("node_flag").fill_null(False)).then(None).otherwise(pl.col("gpu")),
    )


def detect_windows(
    store: Store,
    *,
    job_id: str | None = None,
    since: datetime | None = None,
    config: DetectConfig | None = None,
) -> pl.DataFrame:
    """The per-(job, GPU, window) frame with scores, raw labels and persistence flags."""
    windows = gpu_windows(store, job_id=job_id, since=since, config=config)
    if windows.height == 0:
        return windows
    return flag_windows(label_windows(peer_scores(windows, config), config), config)


# -- NCCL evidence ---------------------------------------------------------------------------------

# Rank -> node / GPU per job, from the job's widest communicator (the world process group).
_RANK_CTE = """
r AS (
    SELECT job_id, comm_id, rank, any_value(node) AS node, any_value(cuda_dev) AS cuda_dev
    FROM nccl_ranks
    WHERE rank IS NOT NULL AND node IS NOT NULL AND job_id IN (SELECT unnest(?::VARCHAR[]))
    GROUP BY job_id, comm_id, rank
),
c AS (
    SELECT job_id, comm_id,
           row_number() OVER (PARTITION BY job_id ORDER BY count(*) DESC, comm_id) AS pick
    FROM r GROUP BY job_id, comm_id
),
ranks AS (
    SELECT r.job_id, r.rank, r.node, r.cuda_dev
    FROM r JOIN c ON r.job_id = c.job_id AND r.comm_id IS NOT DISTINCT FROM c.comm_id
     AND c.pick = 1
)"""
_RANK_MAP_SQL = f"WITH {_RANK_CTE} SELECT * FROM ranks"

# Watchdog timeouts of a job within ``?`` seconds of each other are one hang (one burst); the
# job's ranks that did not time out while most others did are the ones the others waited for.
_TIMEOUT_SQL = f"""
WITH {_RANK_CTE},
t AS (
    SELECT job_id, ts, TRY_CAST(json_extract_string(attrs, '$.rank') AS INTEGER) AS rank,
           json_extract_string(attrs, '$.seq_num') AS seq_num
    FROM events
    WHERE kind = 'nccl_timeout' AND job_id IN (SELECT unnest(?::VARCHAR[]))
),
g AS (
    SELECT *, CASE WHEN ts IS NULL THEN 0
                   WHEN lag(ts) OVER w IS NULL OR epoch(ts - lag(ts) OVER w) > ? THEN 1
                   ELSE 0 END AS new_burst
    FROM t WHERE rank IS NOT NULL
    WINDOW w AS (PARTITION BY job_id, ts IS NULL ORDER BY ts)
),
b AS (
    SELECT job_id, rank,
           CASE WHEN ts IS NULL THEN 's' || coalesce(seq_num, '?')
                ELSE 't' || sum(new_burst) OVER (PARTITION BY job_id, ts IS NULL ORDER BY ts
                                                 ROWS UNBOUNDED PRECEDING) END AS burst
    FROM g
),
timed_out AS (SELECT DISTINCT job_id, burst, rank FROM b),
bursts AS (
    SELECT t.job_id, t.burst, count(*) AS n_out, any_value(n.n_ranks) AS n_ranks
    FROM timed_out t JOIN (SELECT job_id, count(*) AS n_ranks FROM ranks GROUP BY job_id) n
      USING (job_id)
    GROUP BY t.job_id, t.burst
)
SELECT r.job_id, r.node, r.cuda_dev, count(*) AS timeouts
FROM bursts b JOIN ranks r USING (job_id)
WHERE 2 * b.n_out > b.n_ranks AND b.n_out < b.n_ranks
  AND NOT EXISTS (SELECT 1 FROM timed_out t
                  WHERE t.job_id = b.job_id AND t.burst = b.burst AND t.rank = r.rank)
GROUP BY r.job_id, r.node, r.cuda_dev
"""

# Per (job, step) logged by several ranks: the rank clearly slower than the step's median.
_SLOW_RANK_SQL = """
SELECT job_id, step, min(ts) AS ts, arg_max(rank, step_time_s) AS rank,
       arg_max(node, step_time_s) AS step_node
FROM train_steps
WHERE job_id IN (SELECT unnest(?::VARCHAR[])) AND rank IS NOT NULL AND step IS NOT NULL
  AND ts IS NOT NULL AND step_time_s > 0
GROUP BY job_id, step
HAVING count(DISTINCT rank) >= 2 AND max(step_time_s) > (1 + ?) * median(step_time_s)
"""

EVIDENCE_SCHEMA = {"job_id": pl.String, "node": pl.String, "nccl_evidence": pl.Int64}


def nccl_evidence(
    store: Store,
    jobs: pl.DataFrame,
    *,
    burst_gap_s: float = 60.0,
    min_excess: float = 0.02,
    k: int = 2,
) -> pl.DataFrame:
    """Per (job, node): watchdog-timeout bursts in which the node's ranks did not time out while
    most of the job's ranks did, plus windows of a run of >= ``k`` consecutive windows in which a
    rank of the node was the slowest in most logged steps. ``jobs``: job_id, start, window_s."""
    if jobs.height == 0:
        return pl.DataFrame(schema=EVIDENCE_SCHEMA)
    ids = jobs["job_id"].to_list()
    ranks = store.query(_RANK_MAP_SQL, [ids])
    timeouts = pl.DataFrame(schema={"job_id": pl.String, "node": pl.String, "timeouts": pl.Int64})
    if ranks.height:
        timeouts = store.query(_TIMEOUT_SQL, [ids, ids, burst_gap_s])
    steps = store.query(_SLOW_RANK_SQL, [ids, min_excess])
    slow = (
        steps.join(jobs.select("job_id", "start", "window_s"), on="job_id")
        .with_columns(
            w=((pl.col("ts") - pl.col("start")).dt.total_milliseconds() / 1000 / pl.col("window_s"))
            .floor()
            .cast(pl.Int64)
        )
        .with_columns(n_w=pl.len().over("job_id", "w"))
        .group_by("job_id", "w", "rank")
        .agg(pl.len(), pl.col("n_w").first(), pl.col("step_node").first())
        .filter(2 * pl.col("len") > pl.col("n_w"))  # the slowest in most of the window's steps
        .with_columns(top=pl.lit(True))
        .pipe(_persist, ["job_id", "rank"], "top", k, "repeated")
        .filter(pl.col("repeated"))
        .join(ranks.select("job_id", "rank", "node"), on=["job_id", "rank"], how="left")
        .group_by("job_id", node=pl.coalesce("node", "step_node"))
        .agg(slow_windows=pl.len().cast(pl.Int64))
    )
    out = (
        pl.concat(
            [
                timeouts.group_by("job_id", "node").agg(n=pl.col("timeouts").sum()),
                slow.select("job_id", "node", n="slow_windows"),
            ],
            how="vertical_relaxed",
        )
        .filter(pl.col("node").is_not_null())
        .group_by("job_id", "node")
        .agg(nccl_evidence=pl.col("n").sum().cast(pl.Int64))
    )
    return out.select(list(EVIDENCE_SCHEMA)).sort("job_id", "node")


# -- stragglers and their cost ---------------------------------------------------------------------

UNIT = ["job_id", "node", "unit_gpu"]


def _telemetry_slowdown() -> pl.Expr:
    """Slowdown implied by a straggler's own telemetry, when the job has no step times."""
    clock = pl.col("med_clock") / pl.col("clock")
    util = pl.col("med_util") / pl.col("util")
    pcie = (pl.col("med_pcie") / pl.col("pcie")).sqrt()
    return (
        pl.when(pl.col("raw_cause").is_in(["thermal", "power", "clocks"]))
        .then(clock)
        .when(pl.col("raw_cause") == "host")
        .then(util)
        .when(pl.col("raw_cause") == "link")
        .then(pcie)
        .otherwise(1.0)
    )


def _step_windows(store: Store, jobs: pl.DataFrame) -> pl.DataFrame:
    """Median step time per (job, window) from ``train_steps``."""
    if jobs.height == 0:
        return pl.DataFrame(schema={"job_id": pl.String, "w": pl.Int64, "step_s": pl.Float64})
    steps = store.query(
        "SELECT job_id, ts, step_time_s FROM train_steps WHERE job_id IN "
        "(SELECT unnest(?::VARCHAR[])) AND ts IS NOT NULL AND step_time_s > 0",
        [jobs["job_id"].to_list()],
    )
    return (
        steps.join(jobs.select("job_id", "start", "window_s"), on="job_id")
        .with_columns(
            w=((pl.col("ts") - pl.col("start")).dt.total_milliseconds() / 1000 / pl.col("window_s"))
            .floor()
            .cast(pl.Int64)
        )
        .group_by("job_id", "w")
        .agg(step_s=pl.col("step_time_s").median())
    )


def cost(store: Store, flags: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(stragglers, jobs): per straggler its cause, slowdown and share of the wasted GPU-hours;
    per job its slowdown while straggling, straggling hours and wasted GPU-hours."""
    if flags.height == 0 or not flags["flagged"].any():
        return _empty_stragglers(), _empty_jobs()
    fl = flags.filter(pl.col("flagged"))
    jobs = flags.group_by("job_id").agg(
        pl.col("start").first(),
        pl.col("end").first(),
        pl.col("window_s").first(),
        n_gpus=pl.max_horizontal(pl.col("n_gpus").first(), pl.struct("node", "gpu").n_unique()),
    )
    unit_windows = fl.group_by(*UNIT, "w").agg(
        cause=pl.col("raw_cause").drop_nulls().mode().sort().first(),
        tele_s=_telemetry_slowdown().filter(pl.col("raw_cause").is_not_null()).median(),
        link_frac=(pl.col("raw_cause").drop_nulls() == "link").mean(),
    )
    steps = _step_windows(store, jobs)
    straggling = unit_windows.select("job_id", "w").unique()
    clean = steps.join(straggling, on=["job_id", "w"], how="anti")
    base = clean.group_by("job_id").agg(base_s=pl.col("step_s").median(), n_clean=pl.len())
    win = (
        unit_windows.group_by("job_id", "w")
        .agg(tele_s=pl.col("tele_s").max(), n_units=pl.len())
        .join(steps, on=["job_id", "w"], how="left")
        .join(base, on="job_id", how="left")
        .join(jobs, on="job_id")
        .with_columns(
            s=pl.when(pl.col("step_s").is_not_null() & (pl.col("n_clean") >= 3))
            .then(pl.col("step_s") / pl.col("base_s"))
            .otherwise(pl.col("tele_s"))
            .clip(lower_bound=1.0),
            hours=_window_hours(),
        )
        .with_columns(wasted=pl.col("n_gpus") * pl.col("hours") * (1 - 1 / pl.col("s")))
    )
    per_unit = unit_windows.join(
        win.select("job_id", "w", "s", "wasted", "n_units"), on=["job_id", "w"]
    )
    stragglers = (
        per_unit.group_by(UNIT)
        .agg(
            cause=pl.col("cause").mode().sort().first(),
            slowdown=pl.col("s").median(),
            wasted_gpu_h=(pl.col("wasted") / pl.col("n_units")).sum(),
            first_window=pl.col("w").min(),
            windows=pl.len(),
            link_share=pl.col("link_frac").mean(),
        )
        .pipe(_with_nccl, nccl_evidence(store, jobs))
        .join(jobs.select("job_id", "start", "window_s"), on="job_id")
        .with_columns(
            onset=pl.col("start")
            + pl.duration(
                milliseconds=(pl.col("first_window") * pl.col("window_s") * 1000).cast(pl.Int64)
            )
        )
        .select(
            "job_id",
            "node",
            pl.col("unit_gpu").alias("gpu"),
            "cause",
            pl.col("slowdown").round(4),
            pl.col("wasted_gpu_h").round(4),
            "onset",
            "windows",
            "nccl_evidence",
        )
        .sort("wasted_gpu_h", descending=True)
    )
    job_costs = (
        win.group_by("job_id")
        .agg(
            straggling_h=pl.col("hours").sum(),
            wasted_gpu_h=pl.col("wasted").sum(),
            slowdown=(pl.col("s") * pl.col("hours")).sum() / pl.col("hours").sum(),
            n_gpus=pl.col("n_gpus").first(),
            base_step_s=pl.col("base_s").first(),
        )
        .sort("wasted_gpu_h", descending=True)
    )
    return stragglers, job_costs


def _with_nccl(units: pl.DataFrame, evidence: pl.DataFrame) -> pl.DataFrame:
    """Add ``nccl_evidence`` (0 when none) per straggler's node; a node-level straggler whose
    telemetry is ambiguous (some but not most windows say link) and that NCCL names is ``link``."""
    out = units.join(evidence, on=["job_id", "node"], how="left").with_columns(
        pl.col("nccl_evidence").fill_null(0)
    )
    ambiguous = (pl.col("cause") != "link") & (pl.col("link_share") >= LINK_AMBIGUOUS_SHARE)
    confirm = pl.col("unit_gpu").is_null() & (pl.col("nccl_evidence") > 0) & ambiguous
    return out.with_columns(
        cause=pl.when(confirm).then(pl.lit("link")).otherwise(pl.col("cause"))
    ).drop("link_share")


def _window_hours() -> pl.Expr:
    win_start_s = pl.col("w") * pl.col("window_s")
    job_s = (pl.col("end") - pl.col("start")).dt.total_milliseconds() / 1000
    return pl.min_horizontal(pl.col("window_s"), job_s - win_start_s).clip(lower_bound=0) / 3600


def _empty_stragglers() -> pl.DataFrame:
    return pl.DataFrame(
        schema={
            "job_id": pl.String,
            "node": pl.String,
            "gpu": pl.Int32,
            "cause": pl.String,
            "slowdown": pl.Float64,
            "wasted_gpu_h": pl.Float64,
            "onset": pl.Datetime("us"),
            "windows": pl.UInt32,
            "nccl_evidence": pl.Int64,
        }
    )


def _empty_jobs() -> pl.DataFrame:
    return pl.DataFrame(
        schema={
            "job_id": pl.String,
            "straggling_h": pl.Float64,
            "wasted_gpu_h": pl.Float64,
            "slowdown": pl.Float64,
            "n_gpus": pl.Int64,
            "base_step_s": pl.Float64,
        }
    )


@dataclass
class StragglerReport:
    windows: pl.DataFrame  # per (job, GPU, window): scores, labels, flags
    stragglers: pl.DataFrame  # job_id, node, gpu (null: the node), cause, slowdown, wasted_gpu_h,
    # onset, windows, nccl_evidence (NCCL timeout bursts / slowest-rank windows naming the node)
    jobs: pl.DataFrame  # job_id, straggling_h, wasted_gpu_h, slowdown, n_gpus, base_step_s

    def to_json(self) -> dict[str, Any]:
        rows = self.stragglers.select(
            "job_id", "node", "gpu", "cause", "slowdown", "wasted_gpu_h", "onset", "nccl_evidence"
        ).to_dicts()
        return {"stragglers": rows}


def detect(
    store: Store,
    *,
    job_id: str | None = None,
    since: datetime | None = None,
    config: DetectConfig | None = None,
) -> StragglerReport:
    """Detect stragglers in every job (or one) that ended after ``since``, and what they cost."""
    windows = detect_windows(store, job_id=job_id, since=since, config=config)
    stragglers, jobs = cost(store, windows)
    log.info("%d stragglers in %d jobs", stragglers.height, jobs.height)
    return StragglerReport(windows, stragglers, jobs)


def evaluate(stragglers: pl.DataFrame, truth: list[dict[str, Any]]) -> dict[str, Any]:
    """Detected stragglers against ground truth ``{job_id, node, gpu, cause, ...}`` rows.

    A detection matches a true straggler of the same job and node whose GPU is the same, or when
    either side is the whole node. Returns recall, the false share of detections, cause accuracy,
    and per job the estimated vs true wasted GPU-hours."""
    det = stragglers.to_dicts()
    matched_truth: set[int] = set()
    false = 0
    cause_ok = 0
    for d in det:
        hits = [
            i
            for i, t in enumerate(truth)
            if str(t["job_id"]) == str(d["job_id"])
            and t["node"] == d["node"]
            and (t.get("gpu") is None or d["gpu"] is None or int(t["gpu"]) == int(d["gpu"]))
        ]
        if not hits:
            false += 1
            continue
        matched_truth.update(hits)
        cause_ok += any(truth[i]["cause"] == d["cause"] for i in hits)
    est: dict[str, float] = {}
    for d in det:
        est[str(d["job_id"])] = est.get(str(d["job_id"]), 0.0) + float(d["wasted_gpu_h"] or 0)
    true_w: dict[str, float] = {}
    for t in truth:
        true_w[str(t["job_id"])] = true_w.get(str(t["job_id"]), 0.0) + float(
            t.get("wasted_gpu_h") or 0.0
        )
    per_job = {
        j: {
            "true": round(w, 3),
            "estimated": round(est.get(j, 0.0), 3),
            "rel_error": round(abs(est.get(j, 0.0) - w) / w, 4) if w > 0 else None,
        }
        for j, w in true_w.items()
    }
    return {
        "true": len(truth),
        "detected": len(det),
        "recall": len(matched_truth) / len(truth) if truth else 1.0,
        "false_fraction": false / len(det) if det else 0.0,
        "cause_accuracy": cause_ok / (len(det) - false) if len(det) > false else 1.0,
        "wasted": per_job,
    }

"""Lemon nodes: nodes that fail again and again, ranked with the evidence behind each.

The signals are the ones Meta used on its RSC clusters (Kokolis et al., HPCA 2025), over the last
28 days: repeat failures, Xid count, jobs that failed on the node (their stand-in for jobs that
then excluded it), times the node was taken out (down / drain), multi-node and single-node
NODE_FAIL jobs, and the single-node NODE_FAIL rate. Each signal's threshold comes from the fleet's
own 28-day distribution (a high quantile, never below a small absolute floor); a node is flagged
when it failed repeatedly or crosses two thresholds. Nodes are ranked by the sum of their
percentile ranks over the signals.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl

from faultlens.ingest.base import fmt
from faultlens.ingest.store import Store
from faultlens.models.target import failure_episodes

SIGNALS: dict[str, float] = {  # signal -> absolute floor of its threshold
    "failures": 2,
    "xid_count": 5,
    "failed_jobs": 3,
    "out_count": 2,
    "multi_node_node_fails": 2,
    "single_node_node_fails": 2,
    "single_node_fail_rate": 0.2,
}


def _signals(store: Store, lo: datetime, hi: datetime) -> pl.DataFrame:
    sql = """
        WITH ev AS (
            SELECT node,
                   count(*) FILTER (WHERE kind = 'xid') AS xid_count,
                   count(*) FILTER (WHERE kind IN ('node_down', 'node_drain',
                                                   'node_not_responding')) AS out_count
            FROM events WHERE ts >= ? AND ts < ? AND node IS NOT NULL GROUP BY node
        ), j AS (
            SELECT unnest(nodes) AS node, job_id, state, coalesce(n_nodes, len(nodes)) AS n
            FROM jobs WHERE "end" >= ? AND "end" < ? AND nodes IS NOT NULL
        ), js AS (
            SELECT node,
                   count(*) FILTER (WHERE state LIKE 'NODE_FAIL%' AND n > 1)
                       AS multi_node_node_fails,
                   count(*) FILTER (WHERE state LIKE 'NODE_FAIL%' AND n <= 1)
                       AS single_node_node_fails,
                   count(*) FILTER (WHERE n <= 1) AS single_node_jobs
            FROM j GROUP BY node
        ), fj AS (
            SELECT node, count(DISTINCT job_id) AS failed_jobs FROM (
                SELECT node, job_id FROM j WHERE state LIKE 'NODE_FAIL%'
                UNION ALL SELECT node, job_id FROM attributions WHERE "end" >= ? AND "end" < ?
                UNION ALL SELECT node, job_id FROM events
                    WHERE kind = 'job_requeue' AND ts >= ? AND ts < ? AND job_id IS NOT NULL
            ) WHERE node IS NOT NULL GROUP BY node
        )
        SELECT coalesce(ev.node, js.node, fj.node) AS node,
               coalesce(xid_count, 0) AS xid_count, coalesce(out_count, 0) AS out_count,
               coalesce(failed_jobs, 0) AS failed_jobs,
               coalesce(multi_node_node_fails, 0) AS multi_node_node_fails,
               coalesce(single_node_node_fails, 0) AS single_node_node_fails,
               coalesce(single_node_node_fails / nullif(single_node_jobs, 0), 0)
                   AS single_node_fail_rate
        FROM ev FULL JOIN js ON ev.node = js.node
        FULL JOIN fj ON fj.node = coalesce(ev.node, js.node)
    """
    return store.query(sql, [lo, hi, lo, hi, lo, hi, lo, hi])


def lemon_table(
    store: Store, as_of: datetime, *, window_days: int = 28, quantile: float = 0.95
) -> pl.DataFrame:
    """Every node with any signal, ranked; ``flagged`` marks the lemons, ``evidence`` says why."""
    lo = as_of - timedelta(days=window_days)
    episodes = failure_episodes(store, lo, as_of)
    fails = episodes.group_by("node").agg(
        pl.len().alias("failures"),
        pl.col("cause").unique().sort().str.join(",").alias("failure_causes"),
        pl.col("ts").max().alias("last_failure"),
    )
    sig = _signals(store, lo, as_of).join(fails, on="node", how="full", coalesce=True)
    cols = list(SIGNALS)
    sig = sig.with_columns(pl.col(cols).fill_null(0).cast(pl.Float64))
    if sig.height == 0:
        return sig.with_columns(
            pl.lit(None).alias(c) for c in ("rank", "score", "flagged", "evidence")
        )
    thresholds = {
        c: max(floor, float(sig[c].quantile(quantile) or 0)) for c, floor in SIGNALS.items()
    }
    over = [(pl.col(c) >= t).cast(pl.Int32) for c, t in thresholds.items()]
    sig = sig.with_columns(
        sum(pl.col(c).rank("average") / pl.len() * (pl.col(c) > 0) for c in cols).alias("score"),
        pl.sum_horizontal(over).alias("signals_over"),
    ).with_columns(
        ((pl.col("failures") >= thresholds["failures"]) | (pl.col("signals_over") >= 2)).alias(
            "flagged"
        ),
        _evidence(thresholds).alias("evidence"),
    )
    return (
        sig.sort(["flagged", "score", "node"], descending=[True, True, False])
        .with_row_index("rank", offset=1)
        .select(
            "rank",
            "node",
            "flagged",
            pl.col("score").round(3),
            *cols,
            "failure_causes",
            "last_failure",
            "evidence",
        )
    )


def _evidence(thresholds: dict[str, float]) -> pl.Expr:
    parts = []
    for c, t in thresholds.items():
        label = c.replace("_", " ")
        parts.append(
            pl.when(pl.col(c) >= t).then(
                fmt("{} {} (threshold {})", pl.col(c).round(2), pl.lit(label), pl.lit(round(t, 2)))
            )
        )
    causes = pl.when(pl.col("failure_causes").is_not_null()).then(
        fmt(
            "failures {}, last {}",
            pl.col("failure_causes"),
            pl.col("last_failure").dt.strftime("%Y-%m-%d %H:%M"),
        )
    )
    return pl.concat_str([*parts, causes], separator="; ", ignore_nulls=True)

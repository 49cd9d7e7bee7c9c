"""Suggested drains and what became of them, so that the next evaluation can count them.

A scheduled run suggests draining a node (``drain_after_jobs`` / ``drain_now`` in
``predictions``). Later data says whether the drain happened — the node's Slurm state, from
slurmctld logs, ``scontrol show node`` or ``sinfo`` reads, turned DRAIN (or DOWN) after the
suggestion — and whether the node failed within the model's horizon (a failure episode,
``models.target``). ``update_drain_outcomes`` writes one row per suggestion into
``drain_outcomes``:

- a node suggested again and again by runs every few minutes is one suggestion until its
  horizon has passed (the first run that suggested it);
- the outcome is ``pending`` until the data reaches the end of the horizon, then one of the four
  ``DrainOutcome`` values; a drain or failure seen before that is recorded as soon as it is seen.

A drain the model asked for and that was followed by a failure is a confirmed alert; a drain
followed by nothing may have averted the failure or been a false alarm (the data cannot tell);
a suggestion not acted on and followed by a failure is a failure the fleet took although it was
warned. Only pending rows and new suggestions are read again, so the cost follows what is new.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from enum import StrEnum

import polars as pl

from faultlens.ingest.store import Store
from faultlens.models.actions import RiskAction
from faultlens.models.target import EPISODE_GAP, episodes_from_events, target_events

log = logging.getLogger(__name__)

DRAIN_ACTIONS = (RiskAction.DRAIN_AFTER_JOBS.value, RiskAction.DRAIN_NOW.value)
# Slurm states that take a node out of service, as event kinds (``ingest.slurm_*``).
OUT_OF_SERVICE_KINDS = {"node_drain": "DRAIN", "node_down": "DOWN"}


class DrainOutcome(StrEnum):
    PENDING = "pending"  # the horizon has not passed in the data yet
    DRAINED_FAILED = "drained_failed"  # drained, and it failed within the horizon
    DRAINED_NO_FAILURE = "drained_no_failure"  # drained, nothing followed (averted or false)
    NOT_DRAINED_FAILED = "not_drained_failed"  # left in service, and it failed
    NOT_DRAINED_NO_FAILURE = "not_drained_no_failure"  # left in service, nothing followed


_COLUMNS = (
    "run_id",
    "made_at",
    "node",
    "action",
    "score",
    "horizon",
    "drained_at",
    "drain_state",
    "drain_file",
    "drain_line",
    "failed_at",
    "outcome",
    "checked_at",
)


def _new_suggestions(store: Store, after: datetime | None) -> pl.DataFrame:
    """Node-level drain suggestions made after ``after`` (all when None), oldest first."""
    sql = (
        "SELECT run_id, made_at, node, action, score, horizon FROM predictions "
        "WHERE gpu IS NULL AND target = 'failure' AND list_contains(?::VARCHAR[], action)"
    )
    params: list[object] = [list(DRAIN_ACTIONS)]
    if after is not None:
        sql += " AND made_at > ?"
        params.append(after)
    return store.query(sql + " ORDER BY node, made_at", params)


def _collapse(suggestions: pl.DataFrame, open_until: dict[str, datetime]) -> pl.DataFrame:
    """One suggestion per node and horizon: a suggestion made while the node's previous one is
    still inside its horizon (``open_until``: the end of each node's newest recorded one) joins
    it. A loop over suggestions (alerts, not log lines)."""
    keep = []
    until = dict(open_until)
    for i, (node, made_at, horizon) in enumerate(
        suggestions.select("node", "made_at", "horizon").iter_rows()
    ):
        if node in until and made_at < until[node]:
            continue
        keep.append(i)
        until[node] = made_at + timedelta(hours=float(horizon))
    return suggestions[keep]


def _first_after(
    frame: pl.DataFrame, rows: pl.DataFrame, ts_col: str, cols: list[str]
) -> pl.DataFrame:
    """Per suggestion (``rows``: node, made_at, end), the first row of ``frame`` on its node with
    ``made_at <= ts < end``; None columns where there is none."""
    joined = rows.select("node", "made_at", "end").join(frame, on="node", how="inner")
    joined = joined.filter((pl.col(ts_col) >= pl.col("made_at")) & (pl.col(ts_col) < pl.col("end")))
    first = joined.sort(ts_col).group_by("node", "made_at", maintain_order=True).first()
    return rows.select("node", "made_at").join(
        first.select("node", "made_at", *cols), on=["node", "made_at"], how="left"
    )


def _decide(store: Store, rows: pl.DataFrame, newest: datetime) -> pl.DataFrame:
    """Drain and failure seen for each suggestion, and its outcome as of ``newest``."""
    rows = rows.with_columns(
        (pl.col("made_at") + pl.duration(seconds=pl.col("horizon") * 3600)).alias("end")
    )
    lo, hi = rows["made_at"].min(), rows["end"].max()
    states = store.query(
        "SELECT node, ts AS drained_at, kind, file AS drain_file, line AS drain_line "
        "FROM events WHERE list_contains(?::VARCHAR[], kind) AND ts >= ? AND ts < ? "
        "AND node IS NOT NULL",
        [list(OUT_OF_SERVICE_KINDS), lo, hi],
    ).with_columns(
        pl.col("kind")
        .replace_strict(OUT_OF_SERVICE_KINDS, return_dtype=pl.String)
        .alias("drain_state")
    )
    episodes = episodes_from_events(target_events(store, lo - EPISODE_GAP, hi)).select(
        "node", pl.col("ts").alias("failed_at")
    )
    drained = _first_after(
        states, rows, "drained_at", ["drained_at", "drain_state", "drain_file", "drain_line"]
    )
    failed = _first_after(episodes, rows, "failed_at", ["failed_at"])
    out = rows.join(drained, on=["node", "made_at"], how="left").join(
        failed, on=["node", "made_at"], how="left"
    )
    done = pl.col("end") <= pl.lit(newest)
    was_drained = pl.col("drained_at").is_not_null()
    # a failure before the drain was not averted by it: the node was still in service
    drained_first = was_drained & (
        pl.col("failed_at").is_null() | (pl.col("drained_at") <= pl.col("failed_at"))
    )
    has_failed = pl.col("failed_at").is_not_null()
    outcome = (
        pl.when(~done)
        .then(pl.lit(DrainOutcome.PENDING.value))
        .when(drained_first & has_failed)
        .then(pl.lit(DrainOutcome.DRAINED_FAILED.value))
        .when(drained_first)
        .then(pl.lit(DrainOutcome.DRAINED_NO_FAILURE.value))
        .when(has_failed)
        .then(pl.lit(DrainOutcome.NOT_DRAINED_FAILED.value))
        .otherwise(pl.lit(DrainOutcome.NOT_DRAINED_NO_FAILURE.value))
    )
    return out.with_columns(
        outcome.alias("outcome"), pl.lit(newest).cast(pl.Datetime("us")).alias("checked_at")
    ).select(_COLUMNS)


def update_drain_outcomes(store: Store, newest: datetime) -> dict[str, int]:
    """Record the suggestions made since the last update and decide the pending ones as of
    ``newest`` (the newest data, never the wall clock); returns the counts per outcome of the
    rows written. One transaction."""
    recorded = store.query(
        "SELECT node, made_at, horizon, outcome FROM drain_outcomes ORDER BY node, made_at"
    )
    after = recorded["made_at"].max() if recorded.height else None
    open_until = {
        node: made_at + timedelta(hours=float(h))
        for node, made_at, h, _ in recorded.group_by("node").agg(pl.all().last()).iter_rows()
    }
    new = _collapse(_new_suggestions(store, after), open_until)
    pending = store.query(
        "SELECT run_id, made_at, node, action, score, horizon FROM drain_outcomes "
        "WHERE outcome = ?",
        [DrainOutcome.PENDING.value],
    )
    todo = pl.concat([pending, new], how="vertical_relaxed")
    if todo.height == 0:
        return {}
    decided = _decide(store, todo, newest)
    with store.transaction():
        store.execute("DELETE FROM drain_outcomes WHERE outcome = ?", [DrainOutcome.PENDING.value])
        store.insert("drain_outcomes", decided)
    counts = decided.group_by("outcome").len()
    log.info("drain outcomes: %d suggestions checked as of %s", decided.height, newest)
    return dict(counts.iter_rows())


def drain_summary(store: Store) -> dict[str, object]:
    """For ``faultlens status``: suggestions per outcome, and the share of decided drains that a
    failure followed (None before any is decided)."""
    counts = {o.value: 0 for o in DrainOutcome}
    has_table = store.scalar(
        "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'drain_outcomes'"
    )
    if has_table:  # (a database made before the table, opened read-only, has none)
        rows = store.records("SELECT outcome, count(*) AS n FROM drain_outcomes GROUP BY outcome")
        counts.update({r["outcome"]: r["n"] for r in rows})  # (records: no Arrow import)
    drained = counts[DrainOutcome.DRAINED_FAILED] + counts[DrainOutcome.DRAINED_NO_FAILURE]
    decided = sum(n for o, n in counts.items() if o != DrainOutcome.PENDING)
    failed = counts[DrainOutcome.DRAINED_FAILED] + counts[DrainOutcome.NOT_DRAINED_FAILED]
    return {
        "suggested": sum(counts.values()),
        "by_outcome": counts,
        "drained": drained,
        "failure_followed_share": round(failed / decided, 3) if decided else None,
    }

"""Folding Slurm accounting records into one row per job, its steps, and job events.

Input is a "records" frame: one row per sacct line (or JSON job / step), with the ``jobs`` columns,
``step`` (null for the job's own record), ``line`` and, optionally, ``failed_node``. Folding

- keeps every step row in ``job_steps``;
- keeps the last record of a job listed more than once (``sacct -D`` after a requeue) and counts
  the earlier ones as ``restarts``;
- completes a job's missing fields from its steps (nodes, GPUs, times, exit code of ``.batch``);
- emits ``job_node_fail`` events for NODE_FAIL records and ``job_requeue`` events for REQUEUED
  records and for every superseded record of a requeued job.
"""

from __future__ import annotations

import polars as pl

from faultlens.ingest.base import fmt
from faultlens.ingest.schema import TABLES, Kind, conform
from faultlens.ingest.slurm.common import SEVERITY, SOURCE

STEP_COLS = (
    "job_id",
    "step",
    "name",
    "nodes",
    "n_gpus",
    "start",
    "end",
    "elapsed_s",
    "state",
    "state_detail",
    "exit_code",
    "exit_signal",
    "file",
    "line",
)


def _step_summary(steps: pl.DataFrame) -> pl.DataFrame:
    ordered = steps.with_columns((pl.col("step") != "batch").alias("_not_batch")).sort(
        ["_not_batch", "line"]
    )
    return ordered.group_by("job_id", maintain_order=True).agg(
        pl.col("nodes")
        .drop_nulls()
        .list.explode(keep_nulls=False, empty_as_null=False)
        .unique(maintain_order=True)
        .alias("s_nodes"),
        pl.col("n_gpus").max().alias("s_gpus"),
        pl.col("start").min().alias("s_start"),
        pl.col("end").max().alias("s_end"),
        pl.col("elapsed_s").max().alias("s_elapsed"),
        pl.col("exit_code").filter(pl.col("step") == "batch").first().alias("s_exit"),
        pl.col("exit_signal").filter(pl.col("step") == "batch").first().alias("s_signal"),
    )


def _complete(frame: pl.DataFrame, summary: pl.DataFrame) -> pl.DataFrame:
    """Fill a job's missing fields from its steps' summary."""
    joined = frame.join(summary, on="job_id", how="left", maintain_order="left")
    empty = pl.col("nodes").is_null() | (pl.col("nodes").list.len() == 0)
    step_nodes = pl.when(pl.col("s_nodes").list.len() > 0).then(pl.col("s_nodes"))
    span_s = (pl.col("end") - pl.col("start")).dt.total_microseconds() / 1e6
    return (
        joined.with_columns(
            pl.when(empty & step_nodes.is_not_null())
            .then(step_nodes)
            .otherwise(pl.col("nodes"))
            .alias("nodes"),
            pl.coalesce("n_gpus", "s_gpus").alias("n_gpus"),
            pl.coalesce("start", "s_start").alias("start"),
            pl.coalesce("end", "s_end").alias("end"),
            pl.coalesce("exit_code", "s_exit").alias("exit_code"),
            pl.coalesce("exit_signal", "s_signal").alias("exit_signal"),
        )
        .with_columns(
            pl.coalesce("elapsed_s", "s_elapsed", span_s).alias("elapsed_s"),
            pl.coalesce("n_nodes", pl.col("nodes").list.len()).alias("n_nodes"),
        )
        .drop(summary.columns[1:])
    )


def _job_events(records: pl.DataFrame) -> pl.DataFrame:
    """NODE_FAIL and requeue events from every job record (superseded ones included)."""
    failed = pl.col("failed_node") if "failed_node" in records.columns else pl.lit(None, pl.String)
    node = pl.coalesce(failed, pl.col("nodes").list.first())
    base = records.with_columns(
        node.alias("node"),
        pl.coalesce("end", "start", "submit").alias("ts"),
        pl.lit(SOURCE).alias("source"),
        pl.col("state").alias("subkind"),
        pl.struct(
            pl.col("state"),
            pl.col("state_detail"),
            pl.col("restarts"),
            pl.col("n_nodes"),
            pl.col("exit_code"),
            pl.col("exit_signal"),
            pl.col("nodes"),
        )
        .struct.json_encode()
        .alias("attrs"),
    )
    node_fail = base.filter(pl.col("state") == "NODE_FAIL").with_columns(
        pl.lit(Kind.JOB_NODE_FAIL.value).alias("kind"),
        pl.concat_str(
            fmt("job {} NODE_FAIL", "job_id"),
            pl.lit(" on ") + pl.col("node"),
            ignore_nulls=True,
        ).alias("message"),
    )
    requeue = base.filter((pl.col("state") == "REQUEUED") | ~pl.col("_last")).with_columns(
        pl.lit(Kind.JOB_REQUEUE.value).alias("kind"),
        fmt("job {} requeued after {}", "job_id", pl.col("state").fill_null("?")).alias("message"),
    )
    events = pl.concat([node_fail, requeue], how="diagonal_relaxed")
    sev = pl.col("kind").replace_strict(
        {k.value: v.value for k, v in SEVERITY.items()}, default=None, return_dtype=pl.String
    )
    events = events.with_columns(sev.alias("severity"), pl.lit(None, pl.String).alias("ts_flag"))
    # a time the record printed but could not be read says why (``time_flag``)
    why = pl.col("time_flag") if "time_flag" in events.columns else pl.lit(None, pl.String)
    events = events.with_columns(
        pl.when(pl.col("ts").is_null()).then(pl.coalesce(why, pl.lit("no_ts"))).alias("ts_flag")
    )
    keep = [
        "ts",
        "ts_flag",
        "node",
        "source",
        "kind",
        "subkind",
        "severity",
        "job_id",
        "message",
        "attrs",
        "file",
        "line",
    ]
    return conform("events", events.select(keep).sort("line"))


def _typed(records: pl.DataFrame) -> pl.DataFrame:
    """Give the record columns their table types (JSON records may arrive all-null)."""
    schema = {
        **TABLES["jobs"].polars_schema,
        **TABLES["job_steps"].polars_schema,
        "failed_node": pl.String,
    }
    return records.with_columns(
        [pl.col(c).cast(schema[c], strict=False) for c in records.columns if c in schema]
    )


def fold(records: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """Records -> {jobs, job_steps, events} (conformed frames)."""
    if records.height == 0:
        return {}
    records = _typed(records)
    if "step" not in records.columns:
        records = records.with_columns(pl.lit(None, pl.String).alias("step"))
    is_step = pl.col("step").is_not_null()
    steps = records.filter(is_step)
    jobs = records.filter(~is_step).sort("line")
    if "restarts" not in jobs.columns:
        jobs = jobs.with_columns(pl.lit(None, pl.Int32).alias("restarts"))
    jobs = jobs.with_columns(
        (pl.int_range(pl.len()).over("job_id") == pl.len().over("job_id") - 1).alias("_last"),
        pl.max_horizontal(
            (pl.len().over("job_id") - 1).cast(pl.Int32), pl.col("restarts").fill_null(0)
        ).alias("restarts"),
    )
    summary = _step_summary(steps) if steps.height else None
    if summary is not None:
        jobs = _complete(jobs, summary)
    else:
        n_nodes = pl.coalesce("n_nodes", pl.col("nodes").list.len())
        jobs = jobs.with_columns(n_nodes.alias("n_nodes"))
    out: dict[str, pl.DataFrame] = {}
    if jobs.height:
        out["events"] = _job_events(jobs)
        final = jobs.filter(pl.col("_last")).with_columns(pl.lit(SOURCE).alias("source"))
        out["jobs"] = conform(
            "jobs",
            final.select([c for c in final.columns if c not in ("step", "_last", "failed_node")]),
        )
    if steps.height:
        out["job_steps"] = conform(
            "job_steps", steps.select([c for c in STEP_COLS if c in steps.columns])
        )
    return {k: v for k, v in out.items() if v.height}

"""Public GPU-cluster traces -> ``jobs`` / ``job_steps`` / ``gpus`` / ``telemetry``.

So that history from public clusters can be analysed and replayed like our own. Each format is a
plain CSV; every parser is a ``TraceParser`` (whole file, vectorized: split with polars, typed and
checked column by column, bad rows quarantined with the first reason that applies).

Formats (``name``: layout -> rows):

- ``alibaba2023_pods`` (cluster-trace-gpu-v2023 ``openb_pod_list_*.csv``, with header
  ``name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,
  deletion_time,scheduled_time``) -> ``jobs``: job_id = pod name, n_gpus = num_gpu, partition = qos,
  state from pod_phase (Succeeded -> COMPLETED, Failed -> FAILED, Running -> RUNNING, Pending ->
  PENDING; the phase itself in state_detail), submit / start / end = creation / scheduled /
  deletion time. The trace's times are seconds since the trace start; they become timestamps
  from an epoch, ``ctx.options["trace_epoch"]`` (datetime or ISO text), default 2023-01-01.
- ``alibaba2023_nodes`` (``openb_node_list_*.csv``: ``sn,cpu_milli,memory_mib,gpu,model``) ->
  ``gpus``: one row per GPU (node = sn, gpu_index 0..gpu-1, model). CPU-only nodes (gpu = 0) are
  noise. ``openb_node_list_all_node`` and ``openb_node_list_gpu_node`` number the same cluster
  differently (node 0000 is a CPU node in one and a P100 node in the other): load one of them.
- ``pai2020_job`` / ``pai2020_task`` / ``pai2020_instance`` / ``pai2020_machine_spec``
  (cluster-trace-gpu-v2020; the data files have no header line: the column order is that of the
  ``*.header`` files, or ``ctx.columns``). Job table -> ``jobs`` (job_name, user, status:
  Terminated -> COMPLETED, Failed -> FAILED, Running -> RUNNING, Waiting -> PENDING; the job's
  start_time is its submission, so it fills ``submit`` and ``start`` stays null: the tasks carry
  the launch times). Task table -> ``job_steps`` (step = task_name, n_gpus = ceil(inst_num x
  plan_gpu / 100), plan_gpu being percent of one GPU). Instance table -> ``job_steps`` (step =
  task_name/inst_name, nodes = [machine]). Machine spec -> ``gpus``. Times are Unix seconds
  shifted by a constant that keeps the UTC time of day and the weekday; they are placed from
  ``trace_epoch``, default 2020-07-02 (a Thursday like 1970-01-01, and inside the trace's
  July-August 2020), so hours and weekdays stay true.
- ``pai2020_sensor`` / ``pai2020_group_tag`` / ``pai2020_machine_metric``: per-instance averages
  and tags without a time series; rows are checked and counted as noise (recognized by their
  header line only; force the format for the headerless data files).
- ``acme_jobs`` (AcmeTrace ``trace_seren.csv`` / ``trace_kalos.csv`` and the Helios
  ``cluster_log.csv`` of the same group: ``job_id,user,[vc,]node_num,gpu_num,cpu_num,[type,]state,
  submit_time,start_time,end_time,duration,queue,...``; read by header name) -> ``jobs``:
  name = type, partition = vc, elapsed_s = duration, state as given. Times are datetimes as
  written (no zone in the trace, taken as given); plain numbers count as Unix seconds.
- ``acme_summary`` (AcmeTrace ``cluster_summary.csv``: per-cluster aggregate statistics): rows are
  checked (field count, numbers) and counted as noise, since they are not jobs;
  ``read_cluster_summary(path)`` returns them as a frame for cross-checks.
- ``alibaba_genai_duty_cycle`` (cluster-trace-v2026-GenAI ``pod_gpu_duty_cycle_anon.csv``:
  ``value,timestamp_anon,container_ip``) -> ``telemetry`` rows with metric
  ``DCGM_FI_DEV_GPU_UTIL``, node = container_ip (the MD5 of the pod IP, as the file gives), gpu
  null (a pod-level figure). timestamp_anon is shifted Unix seconds, used as is.

A header line is noise; empty lines are noise; a data row with the wrong number of fields, a
number that does not parse, a missing key or an out-of-range value is quarantined.
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl

from faultlens.ingest.base import (
    QUARANTINE_SCHEMA,
    RAW_KEEP_CHARS,
    ChunkResult,
    ParseContext,
    Parsed,
    Quarantined,
    fmt,
    node_expr,
)
from faultlens.ingest.schema import TS, Source, conform

log = logging.getLogger(__name__)

MAX_TIME_S = 1e10  # relative or Unix seconds beyond this are not times
MAX_GPUS_PER_NODE = 64
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"

POD_PHASE_STATE = {
    "Succeeded": "COMPLETED",
    "Failed": "FAILED",
    "Running": "RUNNING",
    "Pending": "PENDING",
}
PAI_STATUS_STATE = {
    "Terminated": "COMPLETED",
    "Failed": "FAILED",
    "Running": "RUNNING",
    "Waiting": "PENDING",
}
PAI_STATUSES = frozenset(PAI_STATUS_STATE) | {"Interrupted", "Ready"}

# Default column layouts (the trace's documented headers).
ALIBABA2023_POD_COLUMNS = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)
ALIBABA2023_POD_NEEDS = (
    "name",
    "num_gpu",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)
ALIBABA2023_NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
PAI_JOB_COLUMNS = ("job_name", "inst_id", "user", "status", "start_time", "end_time")
PAI_TASK_COLUMNS = (
    "job_name",
    "task_name",
    "inst_num",
    "status",
    "start_time",
    "end_time",
    "plan_cpu",
    "plan_mem",
    "plan_gpu",
    "gpu_type",
)
PAI_INSTANCE_COLUMNS = (
    "job_name",
    "task_name",
    "inst_name",
    "worker_name",
    "inst_id",
    "status",
    "start_time",
    "end_time",
    "machine",
)
PAI_MACHINE_SPEC_COLUMNS = ("machine", "gpu_type", "cap_cpu", "cap_mem", "cap_gpu")
PAI_SENSOR_COLUMNS = (
    "job_name",
    "task_name",
    "worker_name",
    "inst_id",
    "machine",
    "gpu_name",
    "cpu_usage",
    "gpu_wrk_util",
    "avg_mem",
    "max_mem",
    "avg_gpu_wrk_mem",
    "max_gpu_wrk_mem",
    "read",
    "write",
    "read_count",
    "write_count",
)
PAI_GROUP_TAG_COLUMNS = ("inst_id", "user", "gpu_type_spec", "group", "workload")
PAI_MACHINE_METRIC_COLUMNS = (
    "worker_name",
    "machine",
    "start_time",
    "end_time",
    "machine_cpu_iowait",
    "machine_cpu_kernel",
    "machine_cpu_usr",
    "machine_gpu",
    "machine_load_1",
    "machine_net_receive",
    "machine_num_worker",
    "machine_cpu",
)
ACME_JOB_COLUMNS = (
    "job_id",
    "user",
    "node_num",
    "gpu_num",
    "cpu_num",
    "type",
    "state",
    "submit_time",
    "start_time",
    "end_time",
    "duration",
    "queue",
    "gpu_time",
)
ACME_SUMMARY_COLUMNS = (
    "id",
    "job_num",
    "cpu_job_num",
    "gpu_job_num",
    "avg_run_time_gpu",
    "avg_que_time_gpu",
    "avg_gpu_num",
    "med_run_time_gpu",
    "med_que_time_gpu",
    "med_gpu_num",
    "max_run_time_gpu",
    "max_gpu",
    "complete_rate_gpu",
    "cancel_rate_gpu",
    "fail_rate_gpu",
    "complete_gpu_time",
    "cancel_gpu_time",
    "fail_gpu_time",
    "complete_rate_gpu_time",
    "cancel_rate_gpu_time",
    "fail_rate_gpu_time",
    "avg_run_time_cpu",
    "avg_que_time_cpu",
    "med_run_time_cpu",
    "med_que_time_cpu",
    "complete_rate_cpu",
    "cancel_rate_cpu",
    "fail_rate_cpu",
)
GENAI_DUTY_COLUMNS = ("value", "timestamp_anon", "container_ip")

F64, I64 = pl.Float64, pl.Int64
TIME = (F64, -MAX_TIME_S, MAX_TIME_S)
COUNT = (F64, 0.0, 1e9)
Check = tuple[Any, float, float]  # dtype, lowest, highest allowed value


# -- splitting and checking ---------------------------------------------------------------------


def _split_quoted(texts: list[str]) -> list[list[str]]:
    """The few lines with quotes go through the csv module (quoted commas stay in one field)."""
    out = []
    for t in texts:
        try:
            out.append(next(csv.reader([t]), []))
        except csv.Error:
            out.append(t.split(","))
    return out


def split_rows(
    lines: pl.Series, first_line: int, columns: tuple[str, ...]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Data rows of a CSV chunk as string columns (empty -> null) and the rows quarantined for a
    wrong field count. Empty lines and header lines (any line equal to the header) are dropped."""
    frame = pl.DataFrame(
        {
            "line": pl.int_range(first_line, first_line + lines.len(), eager=True, dtype=pl.Int64),
            "raw": lines.rename("raw"),
        }
    ).filter(pl.col("raw").is_not_null())
    frame = frame.with_columns(
        text=pl.col("raw").str.strip_prefix("\ufeff").str.strip_chars_end("\r")
    ).filter(
        pl.col("text").str.strip_chars().str.len_chars() > 0,
        pl.col("text").str.replace_all(" ", "") != ",".join(columns),
    )
    is_quoted = pl.col("text").str.contains('"', literal=True)
    plain = frame.filter(~is_quoted).with_columns(fields=pl.col("text").str.split(","))
    quoted = frame.filter(is_quoted)
    if quoted.height:
        fixed = pl.Series(
            _split_quoted(quoted.get_column("text").to_list()), dtype=pl.List(pl.String)
        )
        plain = pl.concat([plain, quoted.with_columns(fields=fixed)]).sort("line")
    frame = plain.with_columns(n=pl.col("fields").list.len())
    n_cols = len(columns)
    bad = frame.filter(pl.col("n") != n_cols)
    quarantine = bad.select(
        "line",
        pl.col("raw").str.slice(0, RAW_KEEP_CHARS),
        reason=fmt(
            f"expected {n_cols} comma-separated fields ({','.join(columns)[:200]}), got {{}}",
            pl.col("n"),
        ),
    )
    good = frame.filter(pl.col("n") == n_cols).select(
        "line",
        "raw",
        *[
            pl.col("fields").list.get(i).str.strip_chars().replace("", None).alias(c)
            for i, c in enumerate(columns)
        ],
    )
    return good, quarantine


def check_rows(
    frame: pl.DataFrame,
    numeric: dict[str, Check],
    required: tuple[str, ...],
    extra: list[pl.Expr] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Cast the numeric columns; rows with a missing required field, a bad number, a value out of
    range or an ``extra`` reason go to quarantine with the first reason that applies."""
    reasons: list[pl.Expr] = list(extra or [])
    for col in required:
        reasons.append(pl.when(pl.col(col).is_null()).then(pl.lit(f"missing {col}")))
    casts = {}
    for col, (dtype, lo, hi) in numeric.items():
        if col not in frame.columns:
            continue
        cast = pl.col(col).cast(dtype, strict=False)
        if dtype == F64:
            cast = cast.fill_nan(None)
        casts[col] = cast
        nan_text = pl.col(col).str.to_lowercase().is_in(["nan", "none", "null"])
        reasons.append(
            pl.when(pl.col(col).is_not_null() & cast.is_null() & ~nan_text).then(
                fmt(f"{col} is not a number: {{}}", pl.col(col).str.slice(0, 40))
            )
        )
        reasons.append(
            pl.when((cast < lo) | (cast > hi)).then(
                fmt(f"{col} out of range [{lo:g}, {hi:g}]: {{}}", pl.col(col))
            )
        )
    if reasons:
        frame = frame.with_columns(reason=pl.coalesce(reasons))
    else:
        frame = frame.with_columns(reason=pl.lit(None, pl.String))
    bad = frame.filter(pl.col("reason").is_not_null()).select(
        "line", pl.col("raw").str.slice(0, RAW_KEEP_CHARS), "reason"
    )
    good = (
        frame.filter(pl.col("reason").is_null())
        .with_columns(**{c: e.alias(c) for c, e in casts.items()})
        .drop("reason")
    )
    return good, bad


def trace_epoch(ctx: ParseContext, default: datetime) -> datetime:
    """Wall-clock time of the trace's second 0: ``ctx.options["trace_epoch"]`` or ``default``."""
    value = ctx.options.get("trace_epoch")
    if value is None:
        return default
    if isinstance(value, datetime):
        return value.replace(tzinfo=None)
    return datetime.fromisoformat(str(value)).replace(tzinfo=None)


def rel_time(col: str, epoch: datetime) -> pl.Expr:
    """Seconds since the trace start -> timestamp from ``epoch`` (null stays null)."""
    ms = (pl.col(col) * 1000).round().cast(pl.Int64)
    return (pl.lit(epoch, dtype=TS) + pl.duration(milliseconds=ms)).cast(TS)


def state_expr(col: str, mapping: dict[str, str]) -> pl.Expr:
    """Known trace states mapped to Slurm's vocabulary; others upper-cased as they are."""
    return pl.col(col).replace_strict(
        mapping, default=pl.col(col).str.to_uppercase(), return_dtype=pl.String
    )


def inventory(
    frame: pl.DataFrame, node: str, count: str, model: str, src: str, ctx: ParseContext
) -> pl.DataFrame:
    """One ``gpus`` row per GPU of each node row with a positive GPU count."""
    return conform(
        "gpus",
        frame.filter(pl.col(count) > 0)
        .select(
            node=node_expr(pl.col(node)),
            gpu_index=pl.int_ranges(0, pl.col(count).cast(pl.Int64)),
            model=pl.col(model),
            source=pl.lit(src),
            file=pl.lit(ctx.file),
        )
        .explode("gpu_index"),
    )


# -- the parser ---------------------------------------------------------------------------------

Builder = Callable[[pl.DataFrame, ParseContext], tuple[dict[str, pl.DataFrame], int]]


def _first_text(head_lines: list[str]) -> str:
    for ln in head_lines:
        if ln and ln.strip():
            return ln.strip().lstrip("\ufeff").replace(" ", "")
    return ""


@dataclass
class TraceParser:
    """One public trace format: its columns, checks, and how rows become table rows."""

    name: str
    columns: tuple[str, ...]
    build: Builder
    numeric: dict[str, Check] = field(default_factory=dict)
    required: tuple[str, ...] = ()  # must be non-empty in every row
    needs: tuple[str, ...] | None = None  # columns the builder needs (default: all of columns)
    checks: Callable[[list[str]], list[pl.Expr]] | None = None  # extra reasons, given columns
    headerless: bool = False  # data files without a header line (PAI 2020)
    header_match: Callable[[list[str]], bool] | None = None  # header-by-name formats
    row_shape: Callable[[list[str]], bool] | None = None  # sniffing headerless rows
    source: Source = Source.TRACE
    whole_file: bool = True

    def sniff(self, head_lines: list[str], path: str) -> float:
        first = _first_text(head_lines)
        if not first:
            return 0.0
        header = first.split(",")
        if tuple(header) == self.columns:
            return 0.99
        if self.header_match is not None and self.header_match(header):
            return 0.95
        if self.headerless and self.row_shape is not None:
            rows = [ln.strip() for ln in head_lines[:50] if ln and ln.strip()]
            hits = sum(1 for r in rows if self.row_shape(next(csv.reader([r]), [])))
            if hits >= 2 and hits / len(rows) >= 0.5:
                return 0.6 * hits / len(rows)
        return 0.0

    def columns_for(self, lines: pl.Series, first_line: int, ctx: ParseContext) -> tuple[str, ...]:
        """``ctx.columns`` if given, the file's own header when it is by name, else the layout."""
        if ctx.columns:
            return tuple(ctx.columns)
        if self.header_match is not None and first_line == 1:
            texts = lines.drop_nulls()
            if texts.len():
                header = tuple(_first_text([texts[0]]).split(","))
                if self.header_match(list(header)) and len(set(header)) == len(header):
                    return header
        return self.columns

    def parse_line(self, line: str, ctx: ParseContext) -> Parsed | Quarantined | None:
        if line is None or not line.strip():
            return None
        return self.parse_chunk(pl.Series([line], dtype=pl.String), 2, ctx, None).to_line_result()

    def new_state(self, ctx: ParseContext) -> Any:
        return None

    def parse_chunk(
        self, lines: pl.Series, first_line: int, ctx: ParseContext, state: Any
    ) -> ChunkResult:
        columns = self.columns_for(lines, first_line, ctx)
        rows, bad_shape = split_rows(lines, first_line, columns)
        needs = self.columns if self.needs is None else self.needs
        missing = [c for c in (*needs, *self.required) if c not in columns]
        if missing:
            reason = f"{self.name}: columns {missing} missing from {','.join(columns)[:200]}"
            bad = rows.select(
                "line", pl.col("raw").str.slice(0, RAW_KEEP_CHARS), reason=pl.lit(reason)
            )
            return ChunkResult(quarantine=pl.concat([bad_shape, bad]).cast(QUARANTINE_SCHEMA))
        extra = self.checks(list(columns)) if self.checks is not None else None
        good, bad_values = check_rows(rows, self.numeric, self.required, extra)
        tables, parsed = self.build(good, ctx) if good.height else ({}, 0)
        quarantine = pl.concat([bad_shape, bad_values]).cast(QUARANTINE_SCHEMA)
        return ChunkResult(
            tables=tables, parsed=parsed, quarantine=quarantine if quarantine.height else None
        )

    def finish(self, ctx: ParseContext, state: Any) -> ChunkResult:
        return ChunkResult()


# -- Alibaba GPU 2023 ---------------------------------------------------------------------------


def _build_alibaba2023_pods(rows: pl.DataFrame, ctx: ParseContext):
    epoch = trace_epoch(ctx, datetime(2023, 1, 1))
    jobs = rows.select(
        job_id=pl.col("name"),
        partition=pl.col("qos"),
        n_nodes=pl.when(pl.col("scheduled_time").is_not_null()).then(1),
        n_gpus=pl.col("num_gpu").cast(pl.Int32),
        submit=rel_time("creation_time", epoch),
        start=rel_time("scheduled_time", epoch),
        end=rel_time("deletion_time", epoch),
        elapsed_s=pl.col("deletion_time") - pl.col("scheduled_time"),
        state=state_expr("pod_phase", POD_PHASE_STATE),
        state_detail=pl.col("pod_phase"),
        source=pl.lit("alibaba2023"),
        file=pl.lit(ctx.file),
        line=pl.col("line"),
    )
    return {"jobs": conform("jobs", jobs)}, rows.height


def _build_alibaba2023_nodes(rows: pl.DataFrame, ctx: ParseContext):
    gpus = inventory(rows, "sn", "gpu", "model", "alibaba2023", ctx)
    return {"gpus": gpus}, int((rows.get_column("gpu") > 0).sum())


# -- Alibaba PAI GPU 2020 -----------------------------------------------------------------------

PAI_EPOCH = datetime(2020, 7, 2)  # a Thursday, as 1970-01-01: keeps weekday and hour


def _pai_times(ctx: ParseContext) -> dict[str, pl.Expr]:
    epoch = trace_epoch(ctx, PAI_EPOCH)
    return {
        "start": rel_time("start_time", epoch),
        "end": rel_time("end_time", epoch),
        "elapsed_s": pl.col("end_time") - pl.col("start_time"),
        "state": state_expr("status", PAI_STATUS_STATE),
        "state_detail": pl.col("status"),
        "file": pl.lit(ctx.file),
        "line": pl.col("line"),
    }


def _build_pai_job(rows: pl.DataFrame, ctx: ParseContext):
    times = _pai_times(ctx)
    times.update(submit=times.pop("start"), start=pl.lit(None, TS), elapsed_s=pl.lit(None, F64))
    jobs = rows.select(
        job_id=pl.col("job_name"), user=pl.col("user"), source=pl.lit("alibaba2020"), **times
    )
    return {"jobs": conform("jobs", jobs)}, rows.height


def _build_pai_task(rows: pl.DataFrame, ctx: ParseContext):
    steps = rows.select(
        job_id=pl.col("job_name"),
        step=pl.col("task_name"),
        name=pl.col("task_name"),
        n_gpus=(pl.col("inst_num").fill_null(1) * pl.col("plan_gpu") / 100).ceil(),
        **_pai_times(ctx),
    )
    return {"job_steps": conform("job_steps", steps)}, rows.height


def _build_pai_instance(rows: pl.DataFrame, ctx: ParseContext):
    steps = rows.select(
        job_id=pl.col("job_name"),
        step=pl.concat_str(
            [pl.col("task_name"), pl.col("inst_name")], separator="/", ignore_nulls=True
        ),
        name=pl.col("task_name"),
        nodes=pl.when(pl.col("machine").is_not_null()).then(
            pl.concat_list([node_expr(pl.col("machine"))])
        ),
        **_pai_times(ctx),
    )
    return {"job_steps": conform("job_steps", steps)}, rows.height


def _build_pai_machine_spec(rows: pl.DataFrame, ctx: ParseContext):
    gpus = inventory(rows, "machine", "cap_gpu", "gpu_type", "alibaba2020", ctx)
    return {"gpus": gpus}, int((rows.get_column("cap_gpu") > 0).sum())


def _is_num(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _pai_shape(n: int, status_at: int, numeric_at: tuple[int, ...]) -> Callable[[list], bool]:
    def shape(fields: list[str]) -> bool:
        return (
            len(fields) == n
            and fields[status_at] in PAI_STATUSES
            and all(not fields[i] or _is_num(fields[i]) for i in numeric_at)
        )

    return shape


def _machine_spec_shape(fields: list[str]) -> bool:
    return (
        len(fields) == 5
        and not _is_num(fields[0])
        and not _is_num(fields[1])
        and all(f.isdigit() for f in fields[2:])
    )


# -- AcmeTrace / Helios -------------------------------------------------------------------------

ACME_REQUIRED = ("job_id", "state", "submit_time", "start_time", "end_time")


def _acme_header(header: list[str]) -> bool:
    cols = set(header)
    return set(ACME_REQUIRED) <= cols and "gpu_num" in cols and bool({"duration", "queue"} & cols)


def _acme_time(col: str) -> pl.Expr:
    text = pl.col(col)
    as_dt = pl.coalesce(
        text.str.to_datetime("%Y-%m-%d %H:%M:%S%.f", strict=False, time_unit="us"),
        text.str.to_datetime("%Y-%m-%dT%H:%M:%S%.f", strict=False, time_unit="us"),
    )
    secs = text.cast(F64, strict=False)
    as_num = pl.from_epoch((secs * 1e6).round().cast(pl.Int64), time_unit="us")
    return pl.coalesce(as_dt, pl.when(secs.abs() < MAX_TIME_S).then(as_num)).cast(TS)


def _build_acme_jobs(rows: pl.DataFrame, ctx: ParseContext):
    cols = set(rows.columns)

    def opt(name: str) -> pl.Expr:
        return pl.col(name) if name in cols else pl.lit(None)

    source = "helios" if "vc" in cols else "acme"
    jobs = rows.select(
        job_id=pl.col("job_id"),
        user=opt("user"),
        name=opt("type"),
        partition=opt("vc"),
        n_nodes=opt("node_num"),
        n_gpus=opt("gpu_num"),
        submit=_acme_time("submit_time"),
        start=_acme_time("start_time"),
        end=_acme_time("end_time"),
        elapsed_s=opt("duration"),
        state=pl.col("state").str.to_uppercase(),
        source=pl.lit(source),
        file=pl.lit(ctx.file),
        line=pl.col("line"),
    )
    return {"jobs": conform("jobs", jobs)}, rows.height


def _acme_time_checks(columns: list[str]) -> list[pl.Expr]:
    """A time that is neither a datetime nor a number is a reason to quarantine the row."""
    return [
        pl.when(pl.col(c).is_not_null() & _acme_time(c).is_null()).then(
            fmt(f"{c} is not a time: {{}}", pl.col(c).str.slice(0, 40))
        )
        for c in ("submit_time", "start_time", "end_time")
        if c in columns
    ]


def _build_nothing(rows: pl.DataFrame, ctx: ParseContext):
    return {}, 0  # recognized and checked, but nothing to store: valid rows are noise


def read_cluster_summary(path: str | Path) -> pl.DataFrame:
    """AcmeTrace ``cluster_summary.csv`` as a typed frame (one row per cluster)."""
    return pl.read_csv(path, infer_schema_length=None)


# -- Alibaba GenAI 2026 -------------------------------------------------------------------------


def _build_genai_duty(rows: pl.DataFrame, ctx: ParseContext):
    telemetry = rows.select(
        ts=pl.from_epoch(
            (pl.col("timestamp_anon") * 1e6).round().cast(pl.Int64), time_unit="us"
        ).cast(TS),
        node=pl.col("container_ip").str.to_lowercase(),
        gpu=pl.lit(None, pl.Int32),
        metric=pl.lit(GPU_UTIL),
        value=pl.col("value"),
    )
    return {"telemetry": conform("telemetry", telemetry)}, rows.height


# -- registry -----------------------------------------------------------------------------------

PARSERS = [
    TraceParser(
        "alibaba2023_pods",
        ALIBABA2023_POD_COLUMNS,
        _build_alibaba2023_pods,
        numeric={
            "cpu_milli": COUNT,
            "memory_mib": COUNT,
            "num_gpu": (F64, 0, 1024),
            "gpu_milli": COUNT,
            "creation_time": TIME,
            "deletion_time": TIME,
            "scheduled_time": TIME,
        },
        required=("name", "pod_phase"),
        needs=ALIBABA2023_POD_NEEDS,
        header_match=lambda h: set(ALIBABA2023_POD_NEEDS) <= set(h),
    ),
    TraceParser(
        "alibaba2023_nodes",
        ALIBABA2023_NODE_COLUMNS,
        _build_alibaba2023_nodes,
        numeric={"cpu_milli": COUNT, "memory_mib": COUNT, "gpu": (F64, 0, MAX_GPUS_PER_NODE)},
        required=("sn", "gpu"),
    ),
    TraceParser(
        "pai2020_job",
        PAI_JOB_COLUMNS,
        _build_pai_job,
        numeric={"start_time": TIME, "end_time": TIME},
        required=("job_name", "status"),
        headerless=True,
        row_shape=_pai_shape(6, 3, (4, 5)),
    ),
    TraceParser(
        "pai2020_task",
        PAI_TASK_COLUMNS,
        _build_pai_task,
        numeric={
            "inst_num": COUNT,
            "start_time": TIME,
            "end_time": TIME,
            "plan_cpu": COUNT,
            "plan_mem": COUNT,
            "plan_gpu": (F64, 0, 100 * MAX_GPUS_PER_NODE),
        },
        required=("job_name", "task_name", "status"),
        headerless=True,
        row_shape=_pai_shape(10, 3, (2, 4, 5, 6, 7, 8)),
    ),
    TraceParser(
        "pai2020_instance",
        PAI_INSTANCE_COLUMNS,
        _build_pai_instance,
        numeric={"start_time": TIME, "end_time": TIME},
        required=("job_name", "task_name", "status"),
        headerless=True,
        row_shape=_pai_shape(9, 5, (6, 7)),
    ),
    TraceParser(
        "pai2020_machine_spec",
        PAI_MACHINE_SPEC_COLUMNS,
        _build_pai_machine_spec,
        numeric={"cap_cpu": COUNT, "cap_mem": COUNT, "cap_gpu": (F64, 0, MAX_GPUS_PER_NODE)},
        required=("machine", "cap_gpu"),
        headerless=True,
        row_shape=_machine_spec_shape,
    ),
    TraceParser(
        "pai2020_sensor",
        PAI_SENSOR_COLUMNS,
        _build_nothing,
        numeric={c: (F64, 0, 1e15) for c in PAI_SENSOR_COLUMNS[6:]},
        required=("job_name",),
    ),
    TraceParser("pai2020_group_tag", PAI_GROUP_TAG_COLUMNS, _build_nothing, required=("inst_id",)),
    TraceParser(
        "pai2020_machine_metric",
        PAI_MACHINE_METRIC_COLUMNS,
        _build_nothing,
        numeric={
            "start_time": TIME,
            "end_time": TIME,
            **{c: (F64, 0, 1e15) for c in PAI_MACHINE_METRIC_COLUMNS[4:]},
        },
        required=("machine",),
    ),
    TraceParser(
        "acme_jobs",
        ACME_JOB_COLUMNS,
        _build_acme_jobs,
        numeric={
            "node_num": COUNT,
            "gpu_num": COUNT,
            "cpu_num": COUNT,
            "duration": TIME,
            "queue": TIME,
            "gpu_time": (F64, 0, 1e15),
        },
        required=("job_id", "state", "submit_time"),
        needs=ACME_REQUIRED,
        checks=_acme_time_checks,
        header_match=_acme_header,
    ),
    TraceParser(
        "acme_summary",
        ACME_SUMMARY_COLUMNS,
        _build_nothing,
        numeric={c: (F64, 0, 1e15) for c in ACME_SUMMARY_COLUMNS[1:]},
        required=("id",),
        header_match=lambda h: h[:4] == list(ACME_SUMMARY_COLUMNS[:4]),
    ),
    TraceParser(
        "alibaba_genai_duty_cycle",
        GENAI_DUTY_COLUMNS,
        _build_genai_duty,
        numeric={"value": (F64, 0, 100.0001), "timestamp_anon": (F64, 0, MAX_TIME_S)},
        required=("value", "timestamp_anon", "container_ip"),
    ),
]

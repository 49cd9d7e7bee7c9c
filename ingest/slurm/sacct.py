"""``sacct`` text output: ``--parsable2``, ``--parsable`` (trailing delimiter), any ``--delimiter``,
``--noheader`` (column names from ``ParseContext.columns``) and the default fixed-width table.

The layout is sniffed from the header: a line naming ``JobID`` (any columns, any order), followed
by a ``---- ----`` line for the fixed-width table, else split on the delimiter found between the
first two names. One row per line: ``1234`` / ``1234_7`` (array task) is the job's record,
``1234.batch`` / ``1234.extern`` / ``1234.0`` its steps. Rows are collected per file and folded
into one row per job at the end (``ingest.slurm.fold``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from faultlens.ingest.base import ChunkResult, ParseContext, Parsed, Quarantined, fmt, numbered
from faultlens.ingest.schema import Source
from faultlens.ingest.slurm.common import (
    SOURCE,
    duration_expr,
    exit_exprs,
    expand_nodes,
    nodes_expr,
    parse_duration,
    parse_exit,
    pick_gpus,
    pick_gpus_expr,
    result,
    split_state,
    state_exprs,
    tz_of,
)
from faultlens.ingest.slurm.fold import STEP_COLS, fold
from faultlens.ingest.slurm.timefmt import read_time, time_exprs

# sacct --helpformat names (lower case) used to recognize a header line.
KNOWN_FIELDS = frozenset(
    """
account admincomment alloccpus allocgres allocnodes alloctres associd avecpu avecpufreq
avediskread avediskwrite avepages averss avevmsize blockid cluster comment constraints container
consumedenergy consumedenergyraw cputime cputimeraw dbindex derivedexitcode elapsed elapsedraw
eligible end exitcode flags gid group jobid jobidraw jobname layout maxdiskread maxdiskreadnode
maxdiskreadtask maxdiskwrite maxdiskwritenode maxdiskwritetask maxpages maxpagesnode maxpagestask
maxrss maxrssnode maxrsstask maxvmsize maxvmsizenode maxvmsizetask mcslabel mincpu mincpunode
mincputask ncpus nnodes nodelist ntasks planned plannedcpu plannedcpuraw priority partition qos
qosraw reason reqcpufreq reqcpufreqmin reqcpufreqmax reqcpufreqgov reqcpus reqgres reqmem
reqnodes reqtres reservation reservationid reserved resvcpu resvcpuraw start state submit
submitline suspended systemcpu systemcomment timelimit timelimitraw totalcpu tresusageinave
tresusageinmax tresusageinmaxnode tresusageinmaxtask tresusageinmin tresusageinminnode
tresusageinmintask tresusageintot tresusageoutave tresusageoutmax tresusageoutmaxnode
tresusageoutmaxtask tresusageoutmin tresusageoutminnode tresusageoutmintask tresusageouttot uid
user usercpu wckey wckeyid workdir
""".split()
)

JOBID_RE = r"^(\d+)(?:_(\d+|\[[^\]\s]*\]?\+?))?(\+\d+)?(?:\.(\S+))?$"
_JOBID = re.compile(JOBID_RE)
_HEADER = re.compile(r"(?i)(?:^|[^a-z])jobid(?:raw)?(?:[^a-z]|$)")
_NAME = r"[A-Za-z][A-Za-z0-9_]*\+?"
_DASHES = re.compile(r"^\s*-+(?:\s+-+)*\s*$")
_LEAD_ID = re.compile(r"^\d+(?:_[\d\[\]\-,+]*)?(?:\+\d+)?(?:\.[A-Za-z0-9_+]+)?([^\w\s.\[\]+-])")
_STEP_HINT = re.compile(r"^\d+(?:_\d+)?\.(?:batch|extern)\b")
_STATE_FIELD = re.compile(
    r"(?:^|[^\w])(COMPLETED|FAILED|CANCELLED|RUNNING|PENDING|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|"
    r"PREEMPTED|REQUEUED)(?:[^\w]|$)"
)
NO_HEADER = (
    "sacct output without a header line: column names unknown "
    "(pass them with --columns, i.e. ParseContext.columns)"
)


def canonical(name: str) -> str:
    """Header name -> lower-case key; a name cut by a fixed-width column (``AllocTR+``) completes
    to the first known field it starts."""
    key = name.strip().lower()
    if key.endswith("+"):
        key = key.rstrip("+")
        if key not in KNOWN_FIELDS:
            key = next((f for f in sorted(KNOWN_FIELDS) if f.startswith(key)), key)
    return key


def is_header(line: str) -> bool:
    """A sacct header: names only, JobID among them, nearly all of them sacct field names."""
    if re.fullmatch(r"\s*JobID(?:Raw)?\W*\s*", line, re.IGNORECASE):
        return True
    if not _HEADER.search(line) or re.search(r"[=\[\]():]", line):
        return False
    names = re.findall(_NAME, line)
    known = sum(canonical(n) in KNOWN_FIELDS for n in names)
    return known >= 2 and known >= 0.8 * len(names)


@dataclass
class Layout:
    kind: str  # delim | fixed | none
    columns: list[str]  # canonical keys
    delimiter: str = "|"
    spans: list[tuple[int, int]] = field(default_factory=list)
    header: str | None = None


def layout_from_header(header: str, following: str | None, ctx: ParseContext) -> Layout:
    if following is not None and _DASHES.match(following):
        spans = [(m.start(), m.end()) for m in re.finditer(r"-+", following)]
        cols = [canonical(header[a:b]) for a, b in spans]
        return Layout("fixed", cols, spans=spans, header=header)
    if ctx.delimiter:
        delim = ctx.delimiter
    else:
        m = re.match(rf"^\s*{_NAME}([^A-Za-z0-9_]+)", header)
        delim = m[1] if m else "|"
    if delim.strip() == "":
        return Layout("space", [canonical(c) for c in header.split()], delimiter=" ", header=header)
    parts = header.strip().split(delim)
    if parts and parts[-1] == "":
        parts = parts[:-1]
    return Layout("delim", [canonical(c) for c in parts], delimiter=delim, header=header)


def layout_without_header(first_data: str | None, ctx: ParseContext) -> Layout:
    if not ctx.columns:
        return Layout("none", [])
    delim = ctx.delimiter
    if not delim and first_data is not None:
        m = _LEAD_ID.match(first_data.strip())
        delim = m[1] if m else None
    return Layout("delim", [canonical(c) for c in ctx.columns], delimiter=delim or "|")


# -- per-line reference path ---------------------------------------------------------------------


def split_fields(line: str, layout: Layout) -> list[str] | None:
    """The line's fields for the layout's columns; None when they cannot be matched up."""
    n = len(layout.columns)
    if layout.kind == "fixed":
        return [line[a:b].strip() for a, b in layout.spans]
    parts = line.split() if layout.kind == "space" else line.split(layout.delimiter)
    if len(parts) == n + 1 and parts[-1] == "":
        parts = parts[:-1]
    if len(parts) > n and layout.kind == "delim":
        return repair_tres(parts, layout)
    return parts if len(parts) == n else None


_KV = re.compile(r"^[A-Za-z][\w/:.-]*=\S*$")
_TRES_COLS = (
    "alloctres",
    "reqtres",
    "tresusageinave",
    "tresusageinmax",
    "tresusageintot",
    "tresusageoutave",
    "tresusageoutmax",
    "tresusageouttot",
    "reqgres",
    "allocgres",
)


def repair_tres(parts: list[str], layout: Layout) -> list[str] | None:
    """With ``--delimiter=,`` a TRES value (``cpu=8,gres/gpu=2``) spans several fields: glue the
    ``key=value`` pieces back onto the TRES column they belong to."""
    n = len(layout.columns)
    extra = len(parts) - n
    if parts and parts[-1] == "":
        extra -= 1
        parts = parts[:-1]
    out: list[str] = []
    i = 0
    for col in layout.columns:
        if i >= len(parts):
            return None
        value = parts[i]
        i += 1
        if col in _TRES_COLS and _KV.match(value or "x=1"):
            while extra > 0 and i < len(parts) and _KV.match(parts[i]):
                value += layout.delimiter + parts[i]
                i += 1
                extra -= 1
        out.append(value)
    return out if i == len(parts) and extra == 0 else None


def record_from_fields(fields: dict[str, str], ctx: ParseContext) -> dict[str, Any] | str:
    """One sacct row -> a record dict (jobs/job_steps columns + ``step``), or a reason string."""

    def get(key: str) -> str | None:
        v = fields.get(key)
        return v.strip() if v is not None and v.strip() != "" else None

    jid = get("jobid") or get("jobidraw")
    m = _JOBID.match(jid or "")
    if not m:
        return f"not a sacct row: JobID {jid!r} is not a job id"
    base, task, het, step = m.groups()
    tz = tz_of(ctx)
    state, detail = split_state(get("state"))
    code, signal = parse_exit(get("exitcode"))
    raw_elapsed = get("elapsedraw")
    elapsed = float(raw_elapsed) if raw_elapsed and raw_elapsed.isdigit() else None
    n_nodes = get("nnodes")
    submit, start, end = (read_time(get(k), tz) for k in ("submit", "start", "end"))
    return {
        "job_id": base + (f"_{task}" if task else "") + (het or ""),
        "array_job_id": base if task else None,
        "step": step,
        "name": get("jobname"),
        "user": get("user"),
        "account": get("account"),
        "partition": get("partition"),
        "nodes": expand_nodes(get("nodelist")),
        "n_nodes": int(n_nodes) if n_nodes and n_nodes.isdigit() else None,
        "n_gpus": pick_gpus(get("alloctres"), get("reqtres"), get("allocgres"), get("reqgres")),
        "submit": submit[0],
        "start": start[0],
        "end": end[0],
        "time_flag": end[1] or start[1] or submit[1],
        "elapsed_s": elapsed if elapsed is not None else parse_duration(get("elapsed")),
        "state": state,
        "state_detail": detail,
        "exit_code": code,
        "exit_signal": signal,
        "source": SOURCE,
        "file": ctx.file,
    }


def parse_line(line: str, ctx: ParseContext) -> Parsed | Quarantined | None:
    """One ``sacct -P`` line with the columns given in ``ctx.columns`` (delimiter
    ``ctx.delimiter``, default ``|``; a header line or blank line is noise)."""
    if line is None or not line.strip():
        return None
    if is_header(line) or _DASHES.match(line):
        return None
    layout = layout_without_header(line, ctx)
    if layout.kind == "none":
        return Quarantined(NO_HEADER)
    fields = split_fields(line, layout)
    if fields is None:
        n = len(line.split(layout.delimiter))
        return Quarantined(f"sacct row has {n} fields, expected {len(layout.columns)}")
    rec = record_from_fields(dict(zip(layout.columns, fields, strict=True)), ctx)
    if isinstance(rec, str):
        return Quarantined(rec)
    if rec["step"] is not None:
        row = {k: rec[k] for k in STEP_COLS if k != "line"}
        return Parsed({"job_steps": [row]})
    return Parsed({"jobs": [{k: v for k, v in rec.items() if k != "step"}]})


# -- vectorized path -------------------------------------------------------------------------------


def _fields_frame(df: pl.DataFrame, layout: Layout) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Split lines into one String column per field: (good rows, rows whose fields don't fit)."""
    n = len(layout.columns)
    names = [f"f{i}" for i in range(n)]
    if layout.kind == "fixed":
        cols = [
            pl.col("raw").str.slice(a, b - a).str.strip_chars().alias(f"f{i}")
            for i, (a, b) in enumerate(layout.spans)
        ]
        return df.with_columns(cols), df.clear()
    parts = (
        pl.col("raw").str.extract_all(r"\S+")
        if layout.kind == "space"
        else pl.col("raw").str.split(layout.delimiter)
    )
    df = df.with_columns(parts.alias("_parts"))
    trailing = (pl.col("_parts").list.len() == n + 1) & (pl.col("_parts").list.last() == "")
    df = df.with_columns(
        pl.when(trailing)
        .then(pl.col("_parts").list.head(n))
        .otherwise(pl.col("_parts"))
        .alias("_parts")
    )
    fits = pl.col("_parts").list.len() == n
    good = (
        df.filter(fits)
        .with_columns([pl.col("_parts").list.get(i).alias(names[i]) for i in range(n)])
        .drop("_parts")
    )
    return good, df.filter(~fits).drop("_parts")


def _repaired(bad: pl.DataFrame, layout: Layout) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per-record repair of the few rows with too many fields (comma-delimited TRES)."""
    rows, left = [], []
    for line, raw in bad.select("line", "raw").iter_rows():
        fields = split_fields(raw, layout)
        if fields is None:
            left.append((line, raw))
        else:
            rows.append({"line": line, "raw": raw, **{f"f{i}": v for i, v in enumerate(fields)}})
    schema = {
        "line": pl.Int64,
        "raw": pl.String,
        **{f"f{i}": pl.String for i in range(len(layout.columns))},
    }
    left_frame = pl.DataFrame(left, schema={"line": pl.Int64, "raw": pl.String}, orient="row")
    return pl.DataFrame(rows, schema=schema), left_frame


def records_expr(layout: Layout, ctx: ParseContext) -> list[pl.Expr]:
    """Expressions turning the ``f<i>`` columns into record columns (vectorized
    ``record_from_fields``)."""
    tz = tz_of(ctx)
    index = {}
    for i, c in enumerate(layout.columns):
        index.setdefault(c, i)

    def get(key: str) -> pl.Expr:
        if key not in index:
            return pl.lit(None, pl.String)
        c = pl.col(f"f{index[key]}").str.strip_chars()
        return pl.when(c != "").then(c)

    jid = pl.coalesce(get("jobid"), get("jobidraw"))
    g = jid.str.extract_groups(JOBID_RE)
    base, task, het, step = (g.struct.field(k) for k in ("1", "2", "3", "4"))
    state, detail = state_exprs(get("state"))
    code, signal = exit_exprs(get("exitcode"))
    raw_elapsed = get("elapsedraw")
    elapsed = pl.when(raw_elapsed.str.contains(r"^\d+$")).then(raw_elapsed.cast(pl.Float64))
    nn = get("nnodes")
    (submit, submit_flag), (start, start_flag), (end, end_flag) = (
        time_exprs(get(k), tz) for k in ("submit", "start", "end")
    )
    times = [
        submit.alias("submit"),
        start.alias("start"),
        end.alias("end"),
        pl.coalesce(end_flag, start_flag, submit_flag).alias("time_flag"),
    ]
    return [
        pl.concat_str(
            [
                base,
                pl.when(task.is_not_null()).then(pl.lit("_") + task).otherwise(pl.lit("")),
                het.fill_null(""),
            ]
        ).alias("job_id"),
        pl.when(task.is_not_null()).then(base).alias("array_job_id"),
        step.alias("step"),
        get("jobname").alias("name"),
        get("user").alias("user"),
        get("account").alias("account"),
        get("partition").alias("partition"),
        nodes_expr(get("nodelist")),
        pl.when(nn.str.contains(r"^\d+$")).then(nn.cast(pl.Int32)).alias("n_nodes"),
        pick_gpus_expr(get("alloctres"), get("reqtres"), get("allocgres"), get("reqgres")).alias(
            "n_gpus"
        ),
        *times,
        pl.coalesce(elapsed, duration_expr(get("elapsed"))).alias("elapsed_s"),
        state.alias("state"),
        detail.alias("state_detail"),
        code.alias("exit_code"),
        signal.alias("exit_signal"),
        pl.lit(SOURCE).alias("source"),
        pl.lit(ctx.file).alias("file"),
        pl.col("line"),
        base.is_not_null().alias("_ok"),
        jid.alias("_jid"),
    ]


def sacct_records(
    df: pl.DataFrame, layout: Layout, ctx: ParseContext
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Data lines (line, raw) -> (records, quarantine)."""
    if layout.kind == "none":
        q = df.select("line", "raw", pl.lit(NO_HEADER).alias("reason"))
        return pl.DataFrame(), q
    good, bad = _fields_frame(df, layout)
    if bad.height:
        fixed, bad = _repaired(bad, layout)
        good = pl.concat([good, fixed], how="diagonal_relaxed") if fixed.height else good
    n = len(layout.columns)
    q_fields = bad.select(
        "line",
        "raw",
        fmt(
            "sacct row has {} fields, expected {}",
            pl.col("raw").str.split(layout.delimiter).list.len(),
            pl.lit(n),
        ).alias("reason"),
    )
    recs = good.select(records_expr(layout, ctx))
    q_id = (
        recs.filter(~pl.col("_ok"))
        .join(good.select("line", "raw"), on="line")
        .select(
            "line",
            "raw",
            fmt("not a sacct row: JobID '{}' is not a job id", pl.col("_jid").fill_null("")).alias(
                "reason"
            ),
        )
    )
    q = pl.concat([q_fields, q_id]).sort("line")
    return recs.filter(pl.col("_ok")).drop("_ok", "_jid").sort("line"), q


@dataclass
class SacctState:
    layout: Layout | None = None
    records: list[pl.DataFrame] = field(default_factory=list)


class SacctParser:
    name = "sacct"
    source = Source.SLURM
    whole_file = False

    def sniff(self, head_lines: list[str], path: str) -> float:
        lines = [ln for ln in head_lines[:60] if ln and ln.strip()]
        if any(is_header(ln) for ln in lines[:20]):
            return 0.9
        ids = [_LEAD_ID.match(ln.strip()) for ln in lines[:50]]
        delims = {m[1] for m in ids if m}
        hits = sum(1 for m in ids if m)
        if not lines or not ids[0] or len(delims) != 1 or hits < 0.6 * len(lines):
            return 0.0
        evidence = any(_STEP_HINT.match(ln) or _STATE_FIELD.search(ln) for ln in lines)
        return 0.6 if evidence else 0.0

    def parse_line(self, line: str, ctx: ParseContext) -> Parsed | Quarantined | None:
        return parse_line(line, ctx)

    def new_state(self, ctx: ParseContext) -> SacctState:
        return SacctState()

    def parse_chunk(
        self, lines: pl.Series, first_line: int, ctx: ParseContext, state: SacctState
    ) -> ChunkResult:
        df = numbered(lines, first_line).filter(
            pl.col("raw").is_not_null() & (pl.col("raw").str.strip_chars() != "")
        )
        if state.layout is None:
            df = self._find_layout(df, ctx, state)
            if state.layout is None:
                return ChunkResult()
        layout = state.layout
        skip = pl.col("raw").str.contains(_DASHES.pattern)
        if layout.header is not None:
            skip = skip | (pl.col("raw").str.strip_chars() == layout.header.strip())
        recs, q = sacct_records(df.filter(~skip), layout, ctx)
        if recs.height:
            state.records.append(recs)
        return ChunkResult(parsed=recs.height, quarantine=q if q.height else None)

    def _find_layout(self, df: pl.DataFrame, ctx: ParseContext, state: SacctState) -> pl.DataFrame:
        """Find the header among the first lines; returns the lines after it."""
        head = df.head(50).rows()
        for i, (_, raw) in enumerate(head):
            if is_header(raw):
                following = head[i + 1][1] if i + 1 < len(head) else None
                state.layout = layout_from_header(raw, following, ctx)
                return df.filter(pl.col("line") > head[i][0])
        first = head[0][1] if head else None
        if first is None:
            return df
        state.layout = layout_without_header(first, ctx)
        return df

    def finish(self, ctx: ParseContext, state: SacctState) -> ChunkResult:
        if not state.records:
            return ChunkResult()
        records = pl.concat(state.records, how="diagonal_relaxed")
        state.records.clear()
        return result(fold(records), parsed=0)

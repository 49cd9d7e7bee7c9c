"""slurmctld / slurmd / slurmstepd logs -> ``events``.

Line shapes (the message after the prefix is classified the same way for all):

- log file: ``[2024-01-02T03:04:05.123] error: Nodes gpu[01-02] not responding`` (local time;
  UTC unless ``ctx.options['tz']``), optionally ``[1234.batch]`` after the stamp (slurmstepd);
  the stamp in any ``LogTimeFormat`` (``slurm.stamps``: ISO with or without milliseconds and
  offset, ``short``, ``thread_id``, ``clock``);
- syslog / journal: ``Feb 02 09:51:48 host slurmd[12912]: slurmd: error: ...`` (year from
  ``ctx.year`` or the file's mtime), or ``2024-02-02T09:51:48+0100 host slurmctld[1]: ...``
  (without the offset, the local time of ``tz``, as the log file's stamps);
  ``systemd`` lines about a Slurm unit are kept, other processes are noise;
- foreground daemons: ``slurmctld: error: ...`` (no time: ``ts_flag = 'no_ts'``), or with
  ``LogTimeFormat=thread_id`` ``Jan  2 03:04:05.123456 4242 rpcmgr 0x7f5c...: error: ...``.

Messages: nodes not responding (``node_not_responding``; ``..., setting DOWN`` -> ``node_down``),
``now responding`` / ``returned to service`` (``node_resume``), ``update_node: node X state set to
DOWN|DRAIN...`` (with the reason of the preceding ``reason set to:`` line of that node),
``Setting node X state to INVAL with reason:...``, ``Killing JobId=N on failed node X``
(``job_node_fail``), requeues (``job_requeue``), and any other ``error:`` / ``fatal:`` line
(``slurm_error``). A line naming a Slurm failure word that fits none of these is quarantined.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import polars as pl

from faultlens.ingest.base import (
    ChunkResult,
    ParseContext,
    Parsed,
    Quarantined,
    line_series,
    normalize_node,
    numbered,
    quarantine_frame,
)
from faultlens.ingest.schema import Kind, Severity, Source
from faultlens.ingest.slurm import stamps, timefmt
from faultlens.ingest.slurm.common import (
    SEVERITY,
    SOURCE,
    expand_nodes,
    result,
    split_reason,
    xid_in,
)
from faultlens.ingest.zones import localize, to_utc, zone_flag, zone_of

ISO = stamps.ISO

SYSLOG = r"[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d"
PROC = r"(?:slurm\w*|systemd)"
# One regex for all prefixes: named groups pick out what each shape carries.
PREFIX = (
    rf"^(?:{stamps.BRACKET}\s+(?:\[(?P<tag>[^\]\s]+)\]\s+)?"
    rf"|(?P<sys>{SYSLOG})\s+(?P<host>\S+)\s+(?P<proc>{PROC})(?:\[\d+\])?:\s+"
    rf"|(?P<iso2>{ISO})(?P<off>Z|[+-]\d\d:?\d\d)?\s+(?P<host2>\S+)\s+(?P<proc2>{PROC})"
    r"(?:\[\d+\])?:\s+"
    r"|(?P<fg>slurmctld|slurmd|slurmdbd|slurmstepd|slurmrestd):\s+"
    rf"|{stamps.THREAD_STDERR})"
    rf"(?:(?:slurmctld|slurmd|slurmstepd|slurmdbd): |{stamps.THREAD_INNER})?(?P<msg>.*)$"
)
_PREFIX = re.compile(PREFIX)

# (kind, regex) in priority order; groups: node (host list), state, reason, job.
RULES: list[tuple[str, str]] = [
    ("down", r"Nodes? (?P<node>\S+) not responding, setting DOWN"),
    (Kind.NODE_NOT_RESPONDING.value, r"Nodes? (?P<node>\S+?),? not responding"),
    (Kind.NODE_RESUME.value, r"Node (?P<node>\S+) (?:now responding|returned to service)"),
    ("reason", r"update_node: node (?P<node>\S+) reason set to: (?P<reason>.*)"),
    ("state", r"node (?P<node>\S+) state set to (?P<state>[A-Z_*+]+)"),
    (
        "state",
        r"[Ss]etting node (?P<node>\S+) state to (?P<state>[A-Z_*+]+)"
        r"(?: with reason:\s*(?P<reason>.*))?",
    ),
    (Kind.NODE_DOWN.value, r"Node (?P<node>\S+) unexpectedly rebooted"),
    (Kind.JOB_NODE_FAIL.value, r"Killing JobId=(?P<job>\d+)\S* on failed node (?P<node>\S+)"),
    (
        Kind.JOB_REQUEUE.value,
        r"(?i:requeu\w*)\b.*?JobId=(?P<job>\d+)\S*"
        r"(?:.*failure of node (?P<node>[^\s,]+))?",
    ),
    (Kind.SLURM_ERROR.value, r"(?P<level>error|fatal):\s*(?P<reason>.*)"),
    (Kind.SLURM_ERROR.value, r"(?P<level>Failed) (?P<reason>.*[Ss]lurm.*)"),
    (Kind.SLURM_ERROR.value, r"(?P<reason>slurm\w*\.service: (?:Main process exited|Failed).*)"),
]
_RULES = [(k, re.compile(r)) for k, r in RULES]
SUSPICIOUS = r"(?i)\b(?:error|fatal|NODE_FAIL|not responding|drain\w*|requeue\w*|xid)\b"
_SUSPICIOUS = re.compile(SUSPICIOUS)
GROUPS = ("node", "state", "reason", "job", "level")


def state_kind(state: str | None) -> str | None:
    s = (state or "").upper().rstrip("*")
    if s.startswith("DOWN") or s.startswith("FAIL"):
        return Kind.NODE_DOWN.value
    if s.startswith("DRAIN") or s.startswith("INVAL"):
        return Kind.NODE_DRAIN.value
    if s.startswith(("IDLE", "RESUME", "UNDRAIN", "ALLOC", "MIX")):
        return Kind.NODE_RESUME.value
    return None


def _severity(kind: str | None, level: str | None) -> str | None:
    if kind == Kind.SLURM_ERROR.value and level == "fatal":
        return Severity.CRITICAL.value
    return SEVERITY[Kind(kind)].value if kind else None


def _scalar_ts(g: dict[str, Any], ctx: ParseContext) -> tuple[datetime | None, str | None]:
    stamped = stamps.stamp_ts(g, ctx)
    if stamped is not None:
        return stamped
    if g["iso2"]:
        ts = datetime.fromisoformat(g["iso2"][:19])
        off = g["off"]
        if not off:
            return to_utc(ts, zone_of(ctx))
        if off != "Z":
            sign = -1 if off[0] == "-" else 1
            ts -= sign * timedelta(hours=int(off[1:3]), minutes=int(off[-2:]))
        return ts, None
    if g["sys"]:
        year = stamps.year_of(ctx)
        if year is None:
            return None, "no_year"
        # with --year, that year (its rollovers are the file's: ``_sys_years``); else the mtime's,
        # flagged as the kernel family flags it
        mtime = None if ctx.year is not None else ctx.mtime
        ts, flag = to_utc(stamps.yearless_ts(g["sys"], year, mtime), zone_of(ctx))
        return ts, flag or (None if ctx.year is not None else "year_from_mtime")
    return None, "no_ts"


def classify(msg: str) -> tuple[str, dict[str, str | None]] | None:
    for kind, rx in _RULES:
        m = rx.search(msg)
        if m:
            groups = {k: m.groupdict().get(k) for k in GROUPS}
            return kind, groups
    return None


def parse_line(line: str, ctx: ParseContext) -> Parsed | Quarantined | None:
    """One daemon log line -> events rows (one per node of a host list), or noise/quarantine."""
    if line is None or not line.strip():
        return None
    m = _PREFIX.match(line)
    if not m:
        return Quarantined("unrecognized Slurm daemon line") if _SUSPICIOUS.search(line) else None
    g = m.groupdict()
    proc = g["proc"] or g["proc2"]
    msg = g["msg"]
    if proc == "systemd" and "slurm" not in msg.lower():
        return None
    hit = classify(msg)
    if hit is None:
        return (
            Quarantined("unrecognized Slurm daemon message")
            if _SUSPICIOUS.search(msg) and not msg.startswith(("debug", "info"))
            else None
        )
    kind, grp = hit
    state = grp["state"]
    if kind == "down":
        kind = Kind.NODE_DOWN.value
    elif kind == "reason":
        kind = Kind.NODE_DRAIN.value
    elif kind == "state":
        kind = state_kind(state)
        if kind is None:
            return None
    try:
        ts, flag = _scalar_ts(g, ctx)
    except (ValueError, OverflowError) as e:
        return Quarantined(f"invalid timestamp: {e}")
    host = normalize_node(g["host"] or g["host2"]) or ctx.node
    nodes = _expand(grp["node"]) or [host]
    reason, by, _ = split_reason(grp["reason"])
    tag_job = (g["tag"] or "").split(".")[0] or None
    rows = [
        {
            "ts": ts,
            "ts_flag": flag,
            "node": node,
            "source": SOURCE,
            "kind": kind,
            "subkind": _subkind(kind, grp, reason),
            "code": xid_in(reason),
            "severity": _severity(kind, grp["level"]),
            "job_id": grp["job"] or tag_job,
            "message": msg.strip(),
            "attrs": _attrs(state, by, proc or g["fg"]),
            "file": ctx.file,
        }
        for node in nodes
    ]
    return Parsed({"events": rows})


def _expand(text: str | None) -> list[str]:
    return expand_nodes(text.rstrip(",")) or [] if text else []


def _subkind(kind: str, grp: dict[str, str | None], reason: str | None) -> str | None:
    if kind == Kind.SLURM_ERROR.value:
        if grp["level"] == "fatal":
            return "fatal"
        fn = re.match(r"^(\w+): ", reason or "")
        return fn[1] if fn else None
    return reason or grp["state"]


def _attrs(state: str | None, by: str | None, proc: str | None) -> str:
    return json.dumps(
        {k: v for k, v in (("by", by), ("daemon", proc), ("state", state)) if v}, sort_keys=True
    )


# -- vectorized path -------------------------------------------------------------------------------

_CANDIDATE = (
    r"(?i)error|fatal|respond|state set to|state to|reason set to|JobId=|rebooted|returned to "
    r"service|Failed|drain|requeu|xid|NODE_FAIL|exited|rebooted"
)


def _ts_exprs(ctx: ParseContext) -> tuple[pl.Expr, pl.Expr]:
    stamp, stamp_flag, _ = stamps.stamp_exprs(ctx)
    off = pl.col("off").str.replace(":", "", literal=True)
    off_min = (
        off.str.slice(1, 2).cast(pl.Int64) * 60 + off.str.slice(3, 2).cast(pl.Int64)
    ) * pl.when(off.str.starts_with("-")).then(-1).otherwise(1)
    tz = zone_of(ctx)
    iso2_local = (
        pl.col("iso2")
        .str.slice(0, 19)
        .str.strptime(pl.Datetime("us"), "%Y-%m-%dT%H:%M:%S", strict=False)
    )
    iso2 = iso2_local - pl.duration(minutes=off_min.fill_null(0))
    if tz:  # without an offset, the zone's wall clock
        iso2 = pl.when(pl.col("off").is_null()).then(localize(iso2_local, tz)).otherwise(iso2)
    year = stamps.year_of(ctx)
    sys_local = pl.lit(None, pl.Datetime("us"))
    if ctx.year is not None:  # --year: the first line's, +1 at each Dec -> Jan (``_sys_years``)
        sys_local = (pl.col("_sys_year").cast(pl.String) + " " + pl.col("sys")).str.strptime(
            pl.Datetime("us"), "%Y %b %d %H:%M:%S", strict=False
        )
    elif year is not None:
        sys_local = stamps.yearless_expr(pl.col("sys"), year, ctx.mtime)
    ts = pl.coalesce(
        stamp,
        pl.when(pl.col("iso2").is_not_null()).then(iso2),
        pl.when(pl.col("sys").is_not_null()).then(localize(sys_local, tz)),
    )
    flag = (
        pl.when(stamp_flag.is_not_null())
        .then(stamp_flag)
        .when(pl.col("sys").is_not_null() & pl.lit(year is None))
        .then(pl.lit("no_year"))
        # a syslog head's year taken from the file's mtime, flagged as the kernel family does
        .when(
            pl.col("sys").is_not_null()
            & stamp.is_null()
            & pl.col("iso2").is_null()
            & pl.lit(ctx.year is None and ctx.mtime is not None)
        )
        .then(pl.lit("year_from_mtime"))
        .when(pl.col("fg").is_not_null())
        .then(pl.lit("no_ts"))
    )
    if tz:  # a wall-clock time the zone has twice or never (the stamp's own is in stamp_flag)
        local = (
            pl.when(pl.col("iso2").is_not_null() & pl.col("off").is_null())
            .then(iso2_local)
            .when(pl.col("sys").is_not_null())
            .then(sys_local)
        )
        flag = pl.coalesce(zone_flag(local, tz), flag)
    return ts, flag


@dataclass
class DaemonState:
    """What a file's chunks hand on: the ``reason set to:`` rows that no later line of their
    node has merged yet (emitted by ``finish`` if none does)."""

    pending: pl.DataFrame | None = None
    # --year: the month of the last syslog-stamped line and the years rolled over so far
    last_month: int | None = None
    year_offset: int = 0


def _sys_years(df: pl.DataFrame, ctx: ParseContext, state: DaemonState | None) -> pl.DataFrame:
    """``df`` with ``_sys_year``: with ``--year``, the year of each syslog stamp (``sys``), as
    the kernel family counts it: ``--year`` for the file's first, one more at each Dec -> Jan
    (a month six or more before the previous line's), across chunks through ``state``."""
    if ctx.year is None:
        return df
    if "year_shift" in df.columns:  # counted over every family's lines (``lines.rolled_over``)
        return df.with_columns(_sys_year=pl.lit(ctx.year) + pl.col("year_shift"))
    month = (
        pl.col("sys")
        .str.slice(0, 3)
        .replace_strict(timefmt.MONTH_NO, default=None, return_dtype=pl.Int32)
    )
    last = state.last_month if state is not None else None
    offset = state.year_offset if state is not None else 0
    prev = month.forward_fill().shift(1).fill_null(last or 0)
    roll = ((prev - month) >= 6).fill_null(False).cast(pl.Int32)
    df = df.with_columns(_m=month, _sys_year=pl.lit(ctx.year + offset) + roll.cum_sum())
    months = df.get_column("_m").drop_nulls()
    if state is not None and months.len():
        state.last_month = int(months[-1])
        state.year_offset = int(df.filter(pl.col("_m").is_not_null())["_sys_year"][-1]) - ctx.year
    return df.drop("_m")


def daemon_chunk(
    lines: pl.Series, first_line: int, ctx: ParseContext, state: DaemonState | None = None
) -> ChunkResult:
    df = numbered(lines, first_line).filter(pl.col("raw").is_not_null())
    return daemon_rows(df, ctx, state)


def daemon_finish(state: DaemonState | None) -> ChunkResult:
    """The reasons still pending at the end of the file, as events."""
    if state is None or state.pending is None or state.pending.height == 0:
        return ChunkResult()
    pending, state.pending = state.pending, None
    out = result({"events": pending}, 0)
    out.parsed_lines = line_series([])
    return out


def daemon_rows(
    df: pl.DataFrame, ctx: ParseContext, state: DaemonState | None = None
) -> ChunkResult:
    """Numbered lines (``line``, ``raw``; no nulls) -> events and quarantine. With ``state``,
    reasons merge into state changes of later chunks as in one pass over the file.

    The same rows as ``parse_line`` per line (then ``reason set to:`` lines merged into the next
    state change of their node), computed over the whole frame: the rules as one ``when`` chain,
    each rule's groups extracted from its own rows, host lists, node names and reasons worked out
    once per distinct string. Only lines whose stamp polars could not read go through
    ``parse_line``, which quarantines the invalid ones with Python's reason."""
    df = df.with_columns(pl.col("raw").str.extract_groups(PREFIX).alias("g")).unnest("g")
    df = _sys_years(df, ctx, state)
    matched = pl.col("msg").is_not_null()
    proc = pl.coalesce("proc", "proc2")
    other_unit = (proc == "systemd").fill_null(False) & ~pl.col(
        "msg"
    ).str.to_lowercase().str.contains("slurm").fill_null(False)
    unmatched = df.filter(~matched & pl.col("raw").str.contains(SUSPICIOUS))
    q_parts = [unmatched.select("line", "raw", reason=pl.lit("unrecognized Slurm daemon line"))]
    ts, flag = _ts_exprs(ctx)
    # Out-of-range stamps (year 0, month 13) stay null here; parse_line quarantines those lines.
    sane = ts.dt.year().is_between(1900, 2200)
    cand = df.filter(matched & ~other_unit & pl.col("msg").str.contains(_CANDIDATE)).with_columns(
        pl.when(sane).then(ts).alias("ts"),
        flag.alias("ts_flag"),
        proc.alias("proc"),
        rule=_rule_expr(),
    )
    unknown = cand.filter(
        pl.col("rule").is_null()
        & pl.col("msg").str.contains(SUSPICIOUS)
        & ~pl.col("msg").str.starts_with("debug")
        & ~pl.col("msg").str.starts_with("info")
    )
    q_parts.append(
        unknown.select("line", "raw", reason=pl.lit("unrecognized Slurm daemon message"))
    )
    rows = _with_kind(_rule_groups(cand.filter(pl.col("rule").is_not_null())))
    # a stamp polars could not read: parse_line says whether the line is quarantined
    stamped = stamps.stamp_exprs(ctx)[2] | pl.col("iso2").is_not_null()
    if stamps.year_of(ctx) is not None:
        stamped = stamped | pl.col("sys").is_not_null()
    bad = rows.filter(pl.col("ts").is_null() & stamped).select("line", "raw")
    bad_q = [
        (n, r, res.reason)
        for n, r in bad.iter_rows()
        if isinstance(res := parse_line(r, ctx), Quarantined)
    ]
    if bad_q:
        q_lines = pl.Series([n for n, _, _ in bad_q], dtype=pl.Int64)
        rows = rows.filter(~pl.col("line").is_in(q_lines.implode()))
        q_parts.append(pl.DataFrame(bad_q, schema=["line", "raw", "reason"], orient="row"))
    events = _event_rows(rows, ctx)
    parsed_lines = events["line"].unique(maintain_order=True).sort().rename("line")
    if state is not None and state.pending is not None:
        events = pl.concat([state.pending, events])
    events, held = _merge_reasons_frame(events, hold=state is not None)
    if state is not None:
        state.pending = held
    q = pl.concat(q_parts, how="vertical_relaxed").sort("line")
    quarantine = (
        quarantine_frame(q["line"].to_list(), q["raw"].to_list(), q["reason"].to_list())
        if q.height
        else None
    )
    out = result({"events": events} if events.height else {}, parsed_lines.len(), quarantine)
    out.parsed_lines = parsed_lines
    return out


def _rule_expr() -> pl.Expr:
    """The index of the first rule of ``RULES`` whose regex finds ``msg`` (null: none)."""
    expr: Any = pl
    for i, (_, rx) in enumerate(RULES):
        expr = expr.when(pl.col("msg").str.contains(rx)).then(pl.lit(i, pl.Int32))
    return expr.otherwise(pl.lit(None, pl.Int32))


def _rule_groups(cand: pl.DataFrame) -> pl.DataFrame:
    """``cand`` with the ``GROUPS`` of each row's rule (rows in line order)."""
    parts = []
    for i in cand["rule"].unique().sort().to_list():
        sub = cand.filter(pl.col("rule") == i)
        sub = sub.with_columns(pl.col("msg").str.extract_groups(RULES[i][1]).alias("_g")).unnest(
            "_g"
        )
        parts.append(
            sub.with_columns(
                [pl.lit(None, pl.String).alias(g) for g in GROUPS if g not in sub.columns]
            ).select(*cand.columns, *GROUPS)
        )
    if not parts:
        return cand.with_columns([pl.lit(None, pl.String).alias(g) for g in GROUPS])
    return pl.concat(parts).sort("line")


def _with_kind(rows: pl.DataFrame) -> pl.DataFrame:
    """The event kind of each rule's row (``state_kind`` for state changes); rows of a state
    that is no event are dropped."""
    rule_kind = pl.col("rule").replace_strict(
        {i: k for i, (k, _) in enumerate(RULES)}, return_dtype=pl.String
    )
    state = pl.col("state").fill_null("").str.to_uppercase().str.strip_chars_end("*")
    by_state = (
        pl.when(state.str.starts_with("DOWN") | state.str.starts_with("FAIL"))
        .then(pl.lit(Kind.NODE_DOWN.value))
        .when(state.str.starts_with("DRAIN") | state.str.starts_with("INVAL"))
        .then(pl.lit(Kind.NODE_DRAIN.value))
        .when(
            pl.any_horizontal(
                [state.str.starts_with(s) for s in ("IDLE", "RESUME", "UNDRAIN", "ALLOC", "MIX")]
            )
        )
        .then(pl.lit(Kind.NODE_RESUME.value))
    )
    kind = (
        pl.when(rule_kind == "down")
        .then(pl.lit(Kind.NODE_DOWN.value))
        .when(rule_kind == "reason")
        .then(pl.lit(Kind.NODE_DRAIN.value))
        .when(rule_kind == "state")
        .then(by_state)
        .otherwise(rule_kind)
    )
    return rows.with_columns(kind=kind).filter(pl.col("kind").is_not_null())


def _mapped(col: pl.Expr, values: pl.Series, fn: Any, dtype: Any) -> pl.Expr:
    """``fn`` of each value of ``col``, computed once per distinct non-null value."""
    mapping = {v: fn(v) for v in values.drop_nulls().unique().to_list()}
    return col.replace_strict(mapping, default=None, return_dtype=dtype)


def _event_rows(rows: pl.DataFrame, ctx: ParseContext) -> pl.DataFrame:
    """The events rows of classified lines: one per node of the line's host list."""
    host = pl.coalesce("host", "host2")
    split = {r: split_reason(r) for r in rows["reason"].drop_nulls().unique().to_list()}
    rows = rows.with_columns(
        _mapped(pl.col("reason"), rows["reason"], lambda r: split[r][1], pl.String).alias("by"),
        _mapped(pl.col("reason"), rows["reason"], lambda r: split[r][0], pl.String).alias("reason"),
        daemon=pl.coalesce("proc", "fg"),
        host=_mapped(host, rows.select(host.alias("h"))["h"], normalize_node, pl.String),
        nodes=_mapped(pl.col("node"), rows["node"], _expand, pl.List(pl.String)),
    )
    triples = rows.select("by", "daemon", "state").unique()
    triples = triples.with_columns(
        attrs=pl.Series(
            [_attrs(t["state"], t["by"], t["daemon"]) for t in triples.iter_rows(named=True)],
            dtype=pl.String,
        )
    )
    rows = rows.join(
        triples, on=["by", "daemon", "state"], how="left", nulls_equal=True, maintain_order="left"
    ).with_columns(pl.col("host").fill_null(pl.lit(ctx.node, pl.String)))
    nodes = pl.when(pl.col("nodes").list.len() > 0).then("nodes").otherwise(pl.concat_list("host"))
    level = pl.col("level")
    kind = pl.col("kind")
    error = kind == Kind.SLURM_ERROR.value
    severity = kind.replace_strict(
        {k.value: v.value for k, v in SEVERITY.items()}, default=None, return_dtype=pl.String
    )
    tag_job = pl.col("tag").str.extract(r"^([^.]*)", 1)
    return (
        rows.with_columns(
            node=nodes,
            subkind=pl.when(error)
            .then(
                pl.when(level == "fatal")
                .then(pl.lit("fatal"))
                .otherwise(pl.col("reason").str.extract(r"^(\w+): ", 1))
            )
            .otherwise(pl.coalesce("reason", "state")),
            code=_mapped(pl.col("reason"), rows["reason"], xid_in, pl.Int64),
            severity=pl.when(error & (level == "fatal"))
            .then(pl.lit(Severity.CRITICAL.value))
            .otherwise(severity),
            job_id=pl.coalesce("job", pl.when(tag_job != "").then(tag_job)),
            message=pl.col("msg").str.strip_chars(),
            source=pl.lit(SOURCE),
            file=pl.lit(ctx.file),
        )
        .explode("node")
        .select(
            "ts",
            "ts_flag",
            "node",
            "source",
            "kind",
            "subkind",
            "code",
            "severity",
            "job_id",
            "message",
            "attrs",
            "file",
            "line",
        )
    )


def _merge_reasons_frame(
    events: pl.DataFrame, hold: bool = False
) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """Attach ``reason set to:`` lines to the next state change (down / drain) of the same node:
    that row takes the reason's subkind and code; a reason that another one of its node follows
    before a state change is dropped, one that nothing follows is kept (``merge_reasons``) —
    with ``hold``, returned apart (the next chunk may merge it) instead of emitted."""
    if events.height == 0:
        return events, None
    is_reason = pl.col("message").str.contains("reason set to:", literal=True)
    target = pl.col("kind").is_in([Kind.NODE_DOWN.value, Kind.NODE_DRAIN.value]) & ~is_reason
    ev = events.with_row_index("_seq").with_columns(_reason=is_reason, _target=target)
    rel = ev.filter(pl.col("_reason") | pl.col("_target")).with_columns(
        _prev_reason=pl.col("_reason").shift(1).over("node").fill_null(False),
        _prev_sub=pl.col("subkind").shift(1).over("node"),
        _prev_code=pl.col("code").shift(1).over("node"),
        _last=pl.col("_seq").shift(-1).over("node").is_null(),
    )
    takes = rel.filter(pl.col("_target") & pl.col("_prev_reason")).select(
        "_seq", "_prev_sub", "_prev_code"
    )
    dropped = rel.filter(pl.col("_reason") & ~pl.col("_last")).select("_seq")
    ev = ev.join(dropped, on="_seq", how="anti").join(takes, on="_seq", how="left")
    took = pl.col("_seq").is_in(takes["_seq"].implode())
    held = None
    if hold:
        kept = rel.filter(pl.col("_reason") & pl.col("_last")).select("_seq")
        held = ev.join(kept, on="_seq", how="semi").select(events.columns)
        ev = ev.join(kept, on="_seq", how="anti")
    merged = (
        ev.with_columns(
            subkind=pl.when(took).then("_prev_sub").otherwise("subkind"),
            code=pl.when(took).then("_prev_code").otherwise("code"),
            message=pl.when(took)
            .then(
                pl.concat_str(
                    [pl.col("message"), pl.lit(" (reason: "), pl.col("_prev_sub"), pl.lit(")")],
                    ignore_nulls=False,
                ).fill_null(pl.col("message") + pl.lit(" (reason: None)"))
            )
            .otherwise("message"),
        )
        .sort("line", "_seq")
        .drop("_seq", "_reason", "_target", "_prev_sub", "_prev_code")
    )
    return merged, held


def merge_reasons(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Attach ``reason set to:`` lines to the next state change of the same node (the per-line
    reference of ``_merge_reasons_frame``)."""
    pending: dict[str, dict[str, Any]] = {}
    out: list[dict[str, Any]] = []
    for row in rows:
        is_reason = "reason set to:" in (row.get("message") or "")
        if is_reason:
            pending[row["node"]] = row
            continue
        prior = (
            pending.pop(row["node"], None)
            if row["kind"] in (Kind.NODE_DOWN.value, Kind.NODE_DRAIN.value)
            else None
        )
        if prior is not None:
            row = {
                **row,
                "subkind": prior["subkind"],
                "code": prior["code"],
                "message": f"{row['message']} (reason: {prior['subkind']})",
            }
        out.append(row)
    out.extend(pending.values())
    out.sort(key=lambda r: r["line"])
    return out


class DaemonParser:
    name = "slurmctld"
    source = Source.SLURM
    whole_file = False

    def sniff(self, head_lines: list[str], path: str) -> float:
        lines = [ln for ln in head_lines[:200] if ln and ln.strip()]
        if not lines:
            return 0.0
        slurmish = sum(
            1
            for ln in lines
            if re.match(stamps.STAMP_LINE, ln)
            or re.search(
                r"\bslurm(?:ctld|d|stepd|dbd)\b|"
                r"_slurm_rpc_|[Ss]lurm",
                ln,
            )
        )
        named = any(re.search(r"slurm(?:ctld|d|stepd|dbd)?[\[:]|_slurm_rpc_", ln) for ln in lines)
        share = slurmish / len(lines)
        if share >= 0.5 and (named or share >= 0.8):
            return 0.85 if named else 0.6
        return 0.0

    def parse_line(self, line: str, ctx: ParseContext) -> Parsed | Quarantined | None:
        return parse_line(line, ctx)

    def new_state(self, ctx: ParseContext) -> DaemonState:
        return DaemonState()

    def parse_chunk(
        self, lines: pl.Series, first_line: int, ctx: ParseContext, state: Any
    ) -> ChunkResult:
        return daemon_chunk(lines, first_line, ctx, state)

    def finish(self, ctx: ParseContext, state: Any) -> ChunkResult:
        return daemon_finish(state)

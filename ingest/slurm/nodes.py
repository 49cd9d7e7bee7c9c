"""Node listings -> ``events``: ``sinfo`` tables (``-R``, ``-lNe``, default) and
``scontrol show node`` (multi-line blocks or ``-o`` one line per node); plus ``kubectl describe``
event tables, which faultlens does not model (their Warning lines are quarantined, the rest noise).

A node that is down (``down``, ``down*``, ``fail``), drained (``drain``, ``drng``,
``IDLE+DRAIN``) or not responding (``idle*``, ``mix*``) becomes one event per node of the row's
host list, with the reason as ``subkind`` / ``message``. ``sinfo -R`` gives the reason's time;
``sinfo -l`` a snapshot time on its first line; ``scontrol`` the reason's ``[user@time]``. All
are the cluster's local time (UTC unless ``tz``); one that ``tz`` has twice or never is left
null, flagged ``tz_ambiguous`` / ``tz_gap`` (``ingest.zones``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import polars as pl

from faultlens.ingest.base import ChunkResult, ParseContext, Parsed, Quarantined, numbered
from faultlens.ingest.schema import Kind, Source
from faultlens.ingest.slurm.common import (
    SEVERITY,
    SOURCE,
    event_time,
    expand_nodes,
    nodes_expr,
    result,
    time_exprs,
    tz_of,
    xid_in,
)
from faultlens.ingest.slurm.fleet_rows import dataset_of, fleet_frame, gres_gpus, seen_at
from faultlens.ingest.zones import AMBIGUOUS, GAP, to_utc

_SINFO_COLS = {
    "NODELIST",
    "HOSTNAMES",
    "STATE",
    "REASON",
    "PARTITION",
    "NODES",
    "USER",
    "TIMESTAMP",
    "AVAIL",
    "TIMELIMIT",
    "CPUS",
    "MEMORY",
    "GRES",
}
# Node state words of sinfo / scontrol (long and short forms), with flags after "+" and the
# suffixes * ~ # ! % $ @ ^ -: a row whose state is none of these does not fit its header.
STATE_WORDS = (
    "alloc|allocated|boot|booting|comp|completing|down|drain|drained|draining|drng|fail|failg|"
    "failing|futr|future|idle|inval|invalid|maint|mix|mixed|npc|perfctrs|plnd|planned|pow_dn|"
    "pow_up|powered_down|powering_down|powering_up|reboot|reboot_issued|reboot_requested|resv|"
    "reserved|unk|unknown|blocked|cloud|not_responding|no_respond|power_down|power_up|dynamic_norm"
)
STATE_RE = rf"(?i)^(?:{STATE_WORDS})[*~#!%$@^-]*(?:\+(?:[a-z_]+)[*~#!%$@^-]*)*$"
_DATE_LINE = re.compile(r"^[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}$")


def node_kind(state: str | None, reason: str | None) -> str | None:
    """sinfo / scontrol state -> event kind (None for a healthy node)."""
    if state is None:  # sinfo -R lists only unavailable nodes
        return (
            Kind.NODE_DOWN.value
            if re.search(r"(?i)not respond", reason or "")
            else Kind.NODE_DRAIN.value
        )
    flags = set(state.upper().replace("*", "+NOT_RESPONDING").split("+"))
    words = {re.sub(r"[~#!%$@^\-]+$", "", f) for f in flags}
    if words & {"DOWN", "FAIL", "FAILG", "FAILING"}:
        return Kind.NODE_DOWN.value
    if words & {"DRAIN", "DRNG", "DRAINING", "DRAINED", "INVAL"}:
        return Kind.NODE_DRAIN.value
    if "NOT_RESPONDING" in words or "NO_RESPOND" in words:
        return Kind.NODE_NOT_RESPONDING.value
    return None


def sinfo_regex(columns: list[str]) -> str:
    """A row regex for a sinfo header: single-token columns, except REASON (may hold spaces)."""
    rx = r"^\s*"
    for i, c in enumerate(columns):
        sep = "" if i == 0 else r"\s+"
        if c == "REASON" and i == len(columns) - 1:
            rx += rf"(?:{sep}(?P<c{i}>.*?))?"
        elif c == "REASON":
            rx += rf"{sep}(?P<c{i}>.*?)"
        else:
            rx += rf"{sep}(?P<c{i}>\S+)"
    return rx + r"\s*$"


def is_sinfo_header(line: str) -> bool:
    words = line.split()
    return (
        bool(words)
        and ("NODELIST" in words or "HOSTNAMES" in words)
        and ("STATE" in words or "REASON" in words)
        and all(w in _SINFO_COLS or w.isupper() for w in words)
    )


def snapshot_time(line: str, ctx: ParseContext) -> tuple[datetime | None, str | None]:
    """(UTC time, flag) of the ``Sun Dec  6 06:53:18 2026`` line ``sinfo -l`` / ``squeue -l``
    print first: the cluster's local time (UTC unless ``tz``; ``ingest.zones.to_utc``)."""
    stamp = re.sub(r"\s+", " ", line.strip())
    return to_utc(datetime.strptime(stamp, "%a %b %d %H:%M:%S %Y"), tz_of(ctx))


def _event(
    node: str,
    kind: str,
    reason: str | None,
    ts: datetime | None,
    ctx: ParseContext,
    attrs: dict[str, Any],
    flag: str | None = None,
) -> dict[str, Any]:
    return {
        "ts": ts,
        "ts_flag": None if ts else flag or "no_ts",
        "node": node,
        "source": SOURCE,
        "kind": kind,
        "subkind": reason,
        "code": xid_in(reason),
        "severity": SEVERITY[Kind(kind)].value,
        "message": reason or attrs.get("state"),
        "attrs": json.dumps({k: v for k, v in attrs.items() if v}, sort_keys=True),
        "file": ctx.file,
    }


def sinfo_parse_line(
    line: str,
    ctx: ParseContext,
    snapshot: datetime | None = None,
    snapshot_flag: str | None = None,
) -> Any:
    """One sinfo row, with the header's column names in ``ctx.columns``, dated by its
    ``TIMESTAMP`` (else by ``snapshot``). A time ``tz`` has twice / never is left null, flagged
    (``snapshot_flag`` for the snapshot's)."""
    if line is None or not line.strip() or is_sinfo_header(line) or _DATE_LINE.match(line):
        return None
    if not ctx.columns or not {"NODELIST", "HOSTNAMES"} & set(ctx.columns):
        return Quarantined("sinfo row without a header line")
    m = re.match(sinfo_regex(ctx.columns), line)
    if not m:
        return Quarantined("sinfo row does not fit its header")
    row = {c: m[f"c{i}"] for i, c in enumerate(ctx.columns)}
    if row.get("STATE") is not None and not re.match(STATE_RE, row["STATE"]):
        return Quarantined("sinfo row does not fit its header")
    reason = row.get("REASON")
    reason = None if not reason or reason.lower() == "none" else reason.strip()
    kind = node_kind(row.get("STATE"), reason)
    nodes = expand_nodes(row.get("NODELIST") or row.get("HOSTNAMES"))
    if not nodes:
        return Quarantined("sinfo row with an unreadable node list")
    ts, flag = event_time(row.get("TIMESTAMP"), tz_of(ctx))
    if ts is None and flag not in (AMBIGUOUS, GAP):
        ts, flag = snapshot, snapshot_flag
    attrs = {"state": row.get("STATE"), "user": row.get("USER"), "partition": row.get("PARTITION")}
    seen = ts or seen_at(ctx)
    part = (row.get("PARTITION") or "").rstrip("*") or None
    fleet = [
        {
            "dataset": dataset_of(ctx),
            "node": n,
            "partition": part,
            "gpus": gres_gpus(row.get("GRES")),
            "first_seen": seen,
            "last_seen": seen,
            "source": "sinfo",
            "file": ctx.file,
            "state": row.get("STATE"),
        }
        for n in nodes
    ]
    events = [_event(n, kind, reason, ts, ctx, attrs, flag) for n in nodes] if kind else []
    return Parsed({"events": events, "nodes": fleet} if events else {"nodes": fleet})


@dataclass
class SinfoState:
    columns: list[str] | None = None
    snapshot: datetime | None = None
    snapshot_flag: str | None = None  # why a snapshot line gave no time (tz_ambiguous, tz_gap)
    dated: bool = False  # a snapshot line was read


class SinfoParser:
    name = "sinfo"
    source = Source.SLURM
    whole_file = False

    def sniff(self, head_lines: list[str], path: str) -> float:
        return 0.9 if any(is_sinfo_header(ln) for ln in head_lines[:10] if ln) else 0.0

    def parse_line(self, line: str, ctx: ParseContext) -> Parsed | Quarantined | None:
        return sinfo_parse_line(line, ctx)

    def new_state(self, ctx: ParseContext) -> SinfoState:
        cols = ctx.columns
        usable = bool(cols) and ("NODELIST" in cols or "HOSTNAMES" in cols)
        return SinfoState(columns=list(cols) if usable and cols else None)

    def parse_chunk(
        self, lines: pl.Series, first_line: int, ctx: ParseContext, state: SinfoState
    ) -> ChunkResult:
        df = numbered(lines, first_line).filter(pl.col("raw").str.strip_chars() != "")
        for line, raw in df.head(20).iter_rows():
            if _DATE_LINE.match(raw) and not state.dated:
                state.snapshot, state.snapshot_flag = snapshot_time(raw, ctx)
                state.dated = True
            if is_sinfo_header(raw):
                state.columns = raw.split()
                df = df.filter(pl.col("line") > line)
                break
        if not state.columns:
            q = df.select("line", "raw", pl.lit("sinfo row without a header line").alias("reason"))
            return result({}, 0, q)
        return self._rows(df, ctx, state)

    def _rows(self, df: pl.DataFrame, ctx: ParseContext, state: SinfoState) -> ChunkResult:
        cols = state.columns or []
        g = (
            df.with_columns(pl.col("raw").str.extract_groups(sinfo_regex(cols)).alias("g"))
            .unnest("g")
            .rename({f"c{i}": c for i, c in enumerate(cols)})
        )
        fits = pl.col(cols[0]).is_not_null()
        if "STATE" in cols:
            fits = fits & pl.col("STATE").str.contains(STATE_RE).fill_null(True)
        skip = pl.col("raw").map_elements(is_sinfo_header, return_dtype=pl.Boolean) | pl.col(
            "raw"
        ).str.contains(_DATE_LINE.pattern)
        bad = g.filter(~fits & ~skip).select(
            "line", "raw", pl.lit("sinfo row does not fit its header").alias("reason")
        )
        g = g.filter(fits & ~skip)
        reason = pl.col("REASON").str.strip_chars() if "REASON" in cols else pl.lit(None, pl.String)
        reason = pl.when(reason.str.to_lowercase().is_in(["none", ""])).then(None).otherwise(reason)
        state_col = pl.col("STATE") if "STATE" in cols else pl.lit(None, pl.String)
        g = g.with_columns(
            reason.alias("_reason"),
            pl.struct(state_col.alias("s"), reason.alias("r"))
            .map_elements(lambda d: node_kind(d["s"], d["r"]), return_dtype=pl.String)
            .alias("kind"),
            nodes_expr(pl.col("NODELIST" if "NODELIST" in cols else "HOSTNAMES")),
        )
        unreadable = g.filter(pl.col("nodes").is_null() | (pl.col("nodes").list.len() == 0))
        bad = pl.concat(
            [
                bad,
                unreadable.select(
                    "line", "raw", pl.lit("sinfo row with an unreadable node list").alias("reason")
                ),
            ]
        )
        g = g.filter(pl.col("nodes").list.len() > 0)
        ts, ts_flag = (
            time_exprs(pl.col("TIMESTAMP"), tz_of(ctx))
            if "TIMESTAMP" in cols
            else (pl.lit(None, pl.Datetime("us")), pl.lit(None, pl.String))
        )
        snapshot = pl.lit(state.snapshot, pl.Datetime("us"))
        untimed = pl.lit("no_ts")
        if tz_of(ctx):  # a reason time the zone has twice / never: null, not the snapshot's
            zoned = ts_flag.is_in([AMBIGUOUS, GAP]).fill_null(False)
            snapshot = pl.when(~zoned).then(snapshot)
            untimed = pl.when(zoned).then(ts_flag).otherwise(pl.lit(state.snapshot_flag or "no_ts"))
        fleet = fleet_frame(  # every listed node is one the site runs, healthy or not
            g.with_columns(
                pl.coalesce(ts, pl.lit(state.snapshot, pl.Datetime("us"))).alias("_seen"),
                pl.col("NODELIST" if "NODELIST" in cols else "HOSTNAMES").alias("_nodelist"),
            ),
            ctx,
            "sinfo",
            nodelist="_nodelist",
            partition="PARTITION",
            gres="GRES",
            seen="_seen",
            state="STATE",
        )
        parsed = g.height
        g = g.filter(pl.col("kind").is_not_null())
        attrs = pl.struct(
            state_col.alias("state"),
            (pl.col("USER") if "USER" in cols else pl.lit(None, pl.String)).alias("user"),
            (pl.col("PARTITION") if "PARTITION" in cols else pl.lit(None, pl.String)).alias(
                "partition"
            ),
        ).map_elements(
            lambda d: json.dumps({k: v for k, v in d.items() if v}, sort_keys=True),
            return_dtype=pl.String,
        )
        events = (
            g.select(
                pl.coalesce(ts, snapshot).alias("ts"),
                untimed.alias("_untimed"),
                pl.col("nodes").alias("node"),
                pl.lit(SOURCE).alias("source"),
                "kind",
                pl.col("_reason").alias("subkind"),
                pl.col("_reason")
                .str.extract(r"(?i)\bxid\s*[:=#]?\s*(\d{1,3})\b")
                .cast(pl.Int32)
                .alias("code"),
                pl.col("kind")
                .replace_strict({k.value: v.value for k, v in SEVERITY.items()}, default=None)
                .alias("severity"),
                pl.coalesce("_reason", state_col).alias("message"),
                attrs.alias("attrs"),
                pl.lit(ctx.file).alias("file"),
                "line",
            )
            .explode("node")
            .with_columns(pl.when(pl.col("ts").is_null()).then(pl.col("_untimed")).alias("ts_flag"))
            .drop("_untimed")
        )
        return result({"events": events, "nodes": fleet}, parsed, bad)

    def finish(self, ctx: ParseContext, state: SinfoState) -> ChunkResult:
        return ChunkResult()

"""``squeue`` text (the default columns, ``-l``, or any ``-o`` format with a header) -> the fleet.

A running job's ``NODELIST`` names nodes the site runs: each becomes a ``nodes`` sighting with the
job's partition, dated by the snapshot line ``squeue -l`` prints (the cluster's local time: UTC
unless ``tz``; else, or where ``tz`` has that time twice or never, the file's time). A
pending job's last column is its reason in parentheses (``(Resources)``): that row is parsed and
names no node. The header, the snapshot line and blank lines are noise; a row that does not fit
its header, or comes before any header, is quarantined.

``parse_line`` documents one row against a header; the chunk path is the same regex over the
whole chunk (``nodes.sinfo_regex``, with the last column allowed to hold spaces).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import polars as pl

from faultlens.ingest.base import ChunkResult, ParseContext, Parsed, Quarantined, numbered
from faultlens.ingest.schema import Source
from faultlens.ingest.slurm.common import expand_nodes, result
from faultlens.ingest.slurm.fleet_rows import dataset_of, fleet_frame, seen_at
from faultlens.ingest.slurm.nodes import _DATE_LINE, snapshot_time

_NODE_COLS = ("NODELIST(REASON)", "NODELIST", "EXEC_HOST")
_KNOWN = {
    "JOBID",
    "PARTITION",
    "NAME",
    "USER",
    "ST",
    "STATE",
    "TIME",
    "TIME_LIMIT",
    "NODES",
    "NODELIST(REASON)",
    "NODELIST",
    "CPUS",
    "ACCOUNT",
    "QOS",
    "PRIORITY",
    "REASON",
    "START_TIME",
    "SUBMIT_TIME",
    "MIN_MEMORY",
    "TRES_PER_NODE",
}


def is_squeue_header(line: str | None) -> bool:
    words = (line or "").split()
    return (
        "JOBID" in words
        and any(c in words for c in _NODE_COLS)
        and all(w in _KNOWN or w.isupper() for w in words)
    )


def row_regex(columns: list[str]) -> str:
    """Single-token columns; the last may hold spaces (a reason such as ``(Priority)``)."""
    parts = [rf"(?P<c{i}>\S+)" for i in range(len(columns) - 1)]
    parts.append(rf"(?P<c{len(columns) - 1}>.*?)")
    return r"^\s*" + r"\s+".join(parts) + r"\s*$"


def _reason(text: str) -> pl.Expr:
    return pl.lit(text).alias("reason")


def _node_col(columns: list[str]) -> str:
    return next(c for c in _NODE_COLS if c in columns)


def parse_line(line: str, columns: list[str] | None, ctx: ParseContext) -> Any:
    """One squeue row against its header's ``columns``: the fleet rows of its node list."""
    if not line or not line.strip() or is_squeue_header(line) or _DATE_LINE.match(line.strip()):
        return None
    if not columns:
        return Quarantined("squeue row without a header line")
    m = re.match(row_regex(columns), line)
    if not m:
        return Quarantined("squeue row does not fit its header")
    row = {c: m[f"c{i}"] for i, c in enumerate(columns)}
    text = row[_node_col(columns)].strip()
    if text.startswith("(") or not text:  # a pending job's reason
        return Parsed({})
    nodes = expand_nodes(text)
    if nodes is None:
        return Quarantined("squeue row with an unreadable node list")
    part = (row.get("PARTITION") or "").rstrip("*") or None
    seen = seen_at(ctx)
    return Parsed(
        {
            "nodes": [
                {
                    "dataset": dataset_of(ctx),
                    "node": n,
                    "partition": part,
                    "first_seen": seen,
                    "last_seen": seen,
                    "source": "squeue",
                    "file": ctx.file,
                }
                for n in nodes
            ]
        }
    )


@dataclass
class SqueueState:
    columns: list[str] | None = None
    snapshot: datetime | None = None
    dated: bool = False  # a snapshot line was read (its time null if ``tz`` has it twice / never)


class SqueueParser:
    name = "squeue"
    source = Source.SLURM
    whole_file = False

    def sniff(self, head_lines: list[str], path: str) -> float:
        return 0.9 if any(is_squeue_header(ln) for ln in head_lines[:10] if ln) else 0.0

    def parse_line(self, line: str, ctx: ParseContext) -> Any:
        usable = ctx.columns and any(c in ctx.columns for c in _NODE_COLS)
        return parse_line(line, list(ctx.columns) if usable else None, ctx)

    def new_state(self, ctx: ParseContext) -> SqueueState:
        return SqueueState()

    def parse_chunk(
        self, lines: pl.Series, first_line: int, ctx: ParseContext, state: SqueueState
    ) -> ChunkResult:
        df = numbered(lines, first_line).filter(pl.col("raw").str.strip_chars() != "")
        stripped = pl.col("raw").str.strip_chars()
        is_date = stripped.str.contains(_DATE_LINE.pattern)
        is_head = pl.col("raw").map_elements(is_squeue_header, return_dtype=pl.Boolean)
        df = df.with_columns(is_date.alias("_date"), is_head.alias("_head"))
        for raw in df.filter(pl.col("_date"))["raw"].head(1):
            if not state.dated:
                state.snapshot = snapshot_time(raw, ctx)[0]
                state.dated = True
        heads = df.filter(pl.col("_head"))
        if heads.height and state.columns is None:
            state.columns = heads["raw"][0].split()
            before = df.filter((pl.col("line") < heads["line"][0]) & ~pl.col("_date"))
        else:
            before = df.head(0)
        rows = df.filter(~pl.col("_date") & ~pl.col("_head"))
        if state.columns is None:
            return result(
                {}, 0, rows.select("line", "raw", _reason("squeue row without a header line"))
            )
        rows = rows.filter(~pl.col("line").is_in(before["line"].implode()))
        cols = state.columns
        g = (
            rows.with_columns(pl.col("raw").str.extract_groups(row_regex(cols)).alias("g"))
            .unnest("g")
            .rename({f"c{i}": c for i, c in enumerate(cols)})
        )
        fits = pl.col(cols[0]).is_not_null()
        q = pl.concat(
            [
                before.select(
                    "line", "raw", pl.lit("squeue row without a header line").alias("reason")
                ),
                g.filter(~fits).select(
                    "line", "raw", pl.lit("squeue row does not fit its header").alias("reason")
                ),
            ]
        )
        g = g.filter(fits)
        text = pl.col(_node_col(cols)).str.strip_chars()
        holding = g.filter(~text.str.starts_with("(") & (text != ""))
        frame = fleet_frame(
            holding.with_columns(
                text.alias("_nodes"),
                pl.lit(state.snapshot, pl.Datetime("us")).alias("_seen"),
            ),
            ctx,
            "squeue",
            nodelist="_nodes",
            partition="PARTITION",
            gres=None,
            seen="_seen",
        )
        named = frame["line"] if frame.height else pl.Series([], dtype=pl.Int64)
        bad = holding.filter(~pl.col("line").is_in(named.implode()))
        unreadable = _reason("squeue row with an unreadable node list")
        q = pl.concat([q, bad.select("line", "raw", unreadable)])
        good = g.filter(~pl.col("line").is_in(bad["line"].implode()))
        out = result({"nodes": frame}, good.height, q)
        out.parsed_lines = good["line"].cast(pl.Int64)
        return out

    def finish(self, ctx: ParseContext, state: SqueueState) -> ChunkResult:
        return ChunkResult()

"""``scontrol show node`` (blocks of ``Key=Value`` lines, or ``-o`` one line per node) -> events,
and ``kubectl describe`` event tables (not modelled: Warning lines quarantined, the rest noise).

A block starts at ``NodeName=``; its ``State=`` (``IDLE+DRAIN``, ``DOWN*``, ...) decides the event
kind and ``Reason=text [user@2024-12-19T11:03:34]`` gives the reason, who set it and when.
"""

from __future__ import annotations

import json
import re
from typing import Any

import polars as pl

from faultlens.ingest.base import (
    ChunkResult,
    ParseContext,
    Parsed,
    Quarantined,
    fmt,
    normalize_node,
    numbered,
)
from faultlens.ingest.schema import Kind, Source
from faultlens.ingest.slurm.common import (
    SEVERITY,
    SOURCE,
    event_time,
    result,
    split_reason,
    tz_of,
    xid_in,
)
from faultlens.ingest.slurm.fleet_rows import dataset_of, fleet_frame, node_gpus, seen_at
from faultlens.ingest.slurm.nodes import node_kind

_NODE = r"^NodeName=(\S+)"
_STATE = r"(?:^|\s)State=(\S+)"
_REASON = r"(?:^|\s)Reason=(.*?)\s*$"
_PARTITIONS = r"(?:^|\s)Partitions=(\S+)"
_TRES = r"(?:^|\s)CfgTRES=(\S+)"


def node_block_event(fields: dict[str, str | None], ctx: ParseContext) -> dict[str, Any] | None:
    """One node's fields (NodeName, State, Reason, Gres) -> an event row, or None if healthy."""
    state = fields.get("State")
    reason, by, stamp = split_reason(fields.get("Reason"))
    reason = None if reason in (None, "(null)", "none") else reason
    kind = node_kind(state, reason) if state else (Kind.NODE_DRAIN.value if reason else None)
    if kind is None:
        return None
    ts, flag = event_time(stamp, tz_of(ctx))
    attrs = {"state": state, "reason_set_by": by, "gres": fields.get("Gres")}
    return {
        "ts": ts,
        "ts_flag": flag,
        "node": normalize_node(fields["NodeName"]),
        "source": SOURCE,
        "kind": kind,
        "subkind": reason,
        "code": xid_in(reason),
        "severity": SEVERITY[Kind(kind)].value,
        "message": reason or state,
        "attrs": json.dumps({k: v for k, v in attrs.items() if v}, sort_keys=True),
        "file": ctx.file,
    }


def fleet_row(fields: dict[str, str | None], ctx: ParseContext) -> dict[str, Any]:
    """One node's ``nodes`` row: its first partition, GPUs from its Gres (else CfgTRES), seen
    at the file's time (scontrol prints no time of its own)."""
    seen = seen_at(ctx)
    parts = (fields.get("Partitions") or "").split(",")
    return {
        "dataset": dataset_of(ctx),
        "node": normalize_node(fields["NodeName"]),
        "partition": parts[0] if parts[0] not in ("", "(null)") else None,
        "gpus": node_gpus(fields.get("Gres"), fields.get("CfgTRES")),
        "first_seen": seen,
        "last_seen": seen,
        "source": "scontrol",
        "file": ctx.file,
        "state": fields.get("State"),
    }


def _fields(line: str) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for key, rx in (
        ("NodeName", _NODE),
        ("State", _STATE),
        ("Reason", _REASON),
        ("Gres", r"(?:^|\s)Gres=(\S+)"),
        ("Partitions", _PARTITIONS),
        ("CfgTRES", _TRES),
    ):
        m = re.search(rx, line)
        if m:
            out[key] = m[1]
    return out


class ScontrolNodeParser:
    name = "scontrol_node"
    source = Source.SLURM
    whole_file = False

    def sniff(self, head_lines: list[str], path: str) -> float:
        lines = [ln for ln in head_lines[:50] if ln and ln.strip()]
        if (
            lines
            and lines[0].startswith("NodeName=")
            and any(
                re.search(r"(?:^|\s)(?:State|CfgTRES|Arch|CPUTot|NodeAddr)=", ln) for ln in lines
            )
        ):
            return 0.9
        return 0.0

    def parse_line(self, line: str, ctx: ParseContext) -> Parsed | Quarantined | None:
        """One ``scontrol show -o node`` line: the node's fleet row, and its event if it is
        down, drained or not responding."""
        if line is None or not line.startswith("NodeName="):
            return None
        fields = _fields(line)
        ev = node_block_event(fields, ctx)
        fleet = fleet_row(fields, ctx)
        return Parsed({"events": [ev], "nodes": [fleet]} if ev else {"nodes": [fleet]})

    def new_state(self, ctx: ParseContext) -> dict[str, Any]:
        return {"block": None}  # the block still open at the end of the previous chunk

    def parse_chunk(
        self, lines: pl.Series, first_line: int, ctx: ParseContext, state: dict[str, Any]
    ) -> ChunkResult:
        df = numbered(lines, first_line).filter(
            pl.col("raw").str.strip_chars() != ""
        )  # blank: noise
        df = df.with_columns(
            pl.col("raw").str.extract(_NODE).alias("NodeName"),
            pl.col("raw").str.extract(_STATE).alias("State"),
            pl.col("raw").str.extract(_REASON).alias("Reason"),
            pl.col("raw").str.extract(r"(?:^|\s)Gres=(\S+)").alias("Gres"),
            pl.col("raw").str.extract(_PARTITIONS).alias("Partitions"),
            pl.col("raw").str.extract(_TRES).alias("CfgTRES"),
        ).with_columns(pl.col("NodeName").is_not_null().cum_sum().alias("block"))
        blocks = (
            df.filter(pl.col("block") > 0)
            .group_by("block", maintain_order=True)
            .agg(
                pl.col("NodeName").first(),
                pl.col("State").drop_nulls().first(),
                pl.col("Reason").drop_nulls().first(),
                pl.col("Gres").drop_nulls().first(),
                pl.col("Partitions").drop_nulls().first(),
                pl.col("CfgTRES").drop_nulls().first(),
                pl.col("line").first().alias("line"),
                pl.len().alias("n_lines"),
                pl.col("line").filter(pl.col("Reason").is_not_null()).first().alias("reason_line"),
            )
        )
        rows = []
        for rec in blocks.iter_rows(named=True):  # one record per node, not per line
            ev = node_block_event(rec, ctx)
            if ev:
                ev["line"] = rec["reason_line"] or rec["line"]
                rows.append(ev)
        tables = {"events": pl.DataFrame(rows, infer_schema_length=None)} if rows else {}
        tables["nodes"] = fleet_frame(  # every node block: the site runs that node
            blocks.with_columns(pl.col("Partitions").str.split(",").list.first()),
            ctx,
            "scontrol",
            nodelist="NodeName",
            partition="Partitions",
            gres="Gres",
            tres="CfgTRES",
            state="State",
        )
        return result(tables, int(blocks["n_lines"].sum() or 0))

    def finish(self, ctx: ParseContext, state: dict[str, Any]) -> ChunkResult:
        return ChunkResult()


_K8S_ROW = r"^\s*(?:Normal|Warning)\s+\w+\s+\S+"
_K8S_WARN = r"^\s*Warning\s+(\w+)\s"
_KLOG_ERR = r"^[EF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+\s+\S+:\d+\]"


class K8sEventsParser:
    """``kubectl describe`` Events and kubelet klog lines: not a faultlens event source. Warning
    events and E/F klog lines are quarantined so that a person can read them; the rest is noise."""

    name = "k8s_events"
    source = Source.K8S
    whole_file = False

    def sniff(self, head_lines: list[str], path: str) -> float:
        lines = [ln for ln in head_lines[:50] if ln and ln.strip()]
        events = any(ln.strip() == "Events:" for ln in lines)
        rows = sum(1 for ln in lines if re.match(_K8S_ROW, ln))
        return 0.5 if rows and (events or rows >= 0.5 * len(lines)) else 0.0

    def parse_line(self, line: str, ctx: ParseContext) -> Parsed | Quarantined | None:
        if line is None:
            return None
        m = re.match(_K8S_WARN, line)
        if m:
            return Quarantined(f"k8s Warning event {m[1]}: not a faultlens event kind")
        if re.match(_KLOG_ERR, line):
            return Quarantined("kubelet error: not a faultlens event kind")
        return None

    def new_state(self, ctx: ParseContext) -> None:
        return None

    def parse_chunk(
        self, lines: pl.Series, first_line: int, ctx: ParseContext, state: Any
    ) -> ChunkResult:
        df = numbered(lines, first_line).filter(pl.col("raw").is_not_null())
        warn = pl.col("raw").str.extract(_K8S_WARN)
        q = df.select(
            "line",
            pl.col("raw").str.slice(0, 4000),
            pl.when(warn.is_not_null())
            .then(fmt("k8s Warning event {}: not a faultlens event kind", warn))
            .when(pl.col("raw").str.contains(_KLOG_ERR))
            .then(pl.lit("kubelet error: not a faultlens event kind"))
            .alias("reason"),
        ).drop_nulls("reason")
        return result({}, 0, q)

    def finish(self, ctx: ParseContext, state: Any) -> ChunkResult:
        return ChunkResult()

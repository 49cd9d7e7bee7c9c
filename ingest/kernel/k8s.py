"""Kubernetes node conditions, as ``kubectl`` prints them (beside the device plugin's lines).

Read wherever they stand in a line-oriented file (the ``lines`` reader routes them here):

- ``kubectl get events`` rows (``[NAMESPACE] LAST-SEEN TYPE REASON OBJECT MESSAGE``) and the
  ``Events:`` table of ``kubectl describe node`` (``TYPE REASON AGE FROM MESSAGE``):
  ``Normal NodeNotReady node/gpu-7 Node gpu-7 status is now: NodeNotReady``, ``Warning Rebooted
  ... Node gpu-7 has been rebooted, boot id: ...``, ``NodeHasDiskPressure``,
  ``NodeHasInsufficientMemory`` / ``PID``, ``NodeReady``. Their age (``12m``) is relative to when
  ``kubectl`` ran, so the time is left unknown unless the line's prefix gives one.
- The ``Conditions:`` table of ``kubectl describe node``: ``Ready False|Unknown`` and
  ``MemoryPressure`` / ``DiskPressure`` / ``PIDPressure True`` rows, timed by their
  ``LastTransitionTime``; the node is the ``Name:`` line above the table. Healthy rows
  (``Ready True``, a pressure ``False``) are noise: they are a state, not a change.
- kubelet's own ``"Node became not ready"`` line (``node="gpu-7"``).

Kinds: not ready -> ``node_not_responding`` (warning), rebooted -> ``node_down`` (error), a
pressure -> ``node_drain`` (warning: the kubelet evicts pods and taints the node), ready ->
``node_resume`` (info). One frame path; the single-line path is the same code on one line.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from faultlens.ingest.base import ChunkResult, ParseContext, node_expr
from faultlens.ingest.schema import EVENTS, Kind, Severity, Source

LITERALS = (
    "NodeNotReady",
    "NodeReady",
    "Rebooted",
    "Pressure",
    "Insufficient",
    "became not ready",
    "KubeletNotReady",
    "NodeStatusUnknown",
    "Name:  ",
)
_NODE = r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}"
_REASONS = (
    r"NodeNotReady|NodeReady|Rebooted|NodeHas(?:Disk|Memory|PID)Pressure"
    r"|NodeHasInsufficient(?:Memory|PID)"
)
EVENT_RE = rf"(?:^|\s)(?P<type>Normal|Warning)\s+(?P<reason>{_REASONS})(?:\s|$)"
EVENT_NODE_RE = rf"\bnode/(?P<obj>{_NODE})|\bNode (?P<msg>{_NODE}) (?:status is now|has been reb)"
BOOT_ID_RE = r"boot id: (?P<boot>[0-9A-Fa-f-]{8,64})"
_RFC1123 = r"[A-Z][a-z]{2}, [0-9]{2} [A-Z][a-z]{2} [0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2} [+-][0-9]{4}"
COND_RE = (
    r"^\s*(?P<cond>Ready|MemoryPressure|DiskPressure|PIDPressure)\s+(?P<status>True|False|Unknown)"
    rf"\s+(?:(?P<heartbeat>{_RFC1123})\s+(?P<transition>{_RFC1123})\s+)?(?P<why>[A-Za-z]+)?"
)
KUBELET_RE = rf"\"Node became not ready\"(?:.*?\bnode=\"(?P<node>{_NODE})\")?"
NAME_RE = rf"^Name:\s+(?P<name>{_NODE})\s*$"
# what routes a candidate line here (``ingest.lines``)
ANCHOR = rf"{EVENT_RE}|{COND_RE}\s|\"Node became not ready\"|{NAME_RE}"

_PRESSURE = {
    "NodeHasDiskPressure": "disk_pressure",
    "NodeHasMemoryPressure": "memory_pressure",
    "NodeHasInsufficientMemory": "memory_pressure",
    "NodeHasPIDPressure": "pid_pressure",
    "NodeHasInsufficientPID": "pid_pressure",
    "DiskPressure": "disk_pressure",
    "MemoryPressure": "memory_pressure",
    "PIDPressure": "pid_pressure",
}
_KIND = {
    "not_ready": (Kind.NODE_NOT_RESPONDING, Severity.WARNING),
    "rebooted": (Kind.NODE_DOWN, Severity.ERROR),
    "ready": (Kind.NODE_RESUME, Severity.INFO),
    **{v: (Kind.NODE_DRAIN, Severity.WARNING) for v in _PRESSURE.values()},
}


@dataclass
class K8sState:
    node: str | None = None  # the ``Name:`` of the ``kubectl describe node`` being read


def _subkind() -> pl.Expr:
    """The change a row says (null: a healthy state row, noise)."""
    ev, cond = pl.col("_ev"), pl.col("_cond")
    reason = ev.struct.field("reason")
    status = cond.struct.field("status")
    c = cond.struct.field("cond")
    return (
        pl.when(reason == "NodeNotReady")
        .then(pl.lit("not_ready"))
        .when(reason == "Rebooted")
        .then(pl.lit("rebooted"))
        .when(reason == "NodeReady")
        .then(pl.lit("ready"))
        .when(reason.is_not_null())
        .then(reason.replace_strict(_PRESSURE, default=None))
        .when((c == "Ready") & status.is_in(["False", "Unknown"]))
        .then(pl.lit("not_ready"))
        .when(c.is_not_null() & (c != "Ready") & (status == "True"))
        .then(c.replace_strict(_PRESSURE, default=None))
        .when(pl.col("_kubelet").is_not_null())
        .then(pl.lit("not_ready"))
    )


def node_condition_rows(cand: pl.DataFrame, ctx: ParseContext, state: K8sState) -> ChunkResult:
    """Candidate lines (``line``, ``raw``: the message after any outer prefix) -> events."""
    raw = pl.col("raw")
    f = cand.with_columns(
        _ev=raw.str.extract_groups(EVENT_RE),
        _cond=raw.str.extract_groups(COND_RE),
        _kubelet=raw.str.extract_groups(KUBELET_RE).struct.field("node"),
        _name=raw.str.extract(NAME_RE, 1),
    )
    f = f.with_columns(
        _kubelet=pl.when(raw.str.contains('"Node became not ready"', literal=True)).then(
            pl.col("_kubelet").fill_null("")
        ),
        _described=pl.col("_name").forward_fill().fill_null(pl.lit(state.node, pl.String)),
    )
    names = f.get_column("_name").drop_nulls()
    if names.len():
        state.node = names[-1]
    f = f.with_columns(_sub=_subkind()).filter(pl.col("_sub").is_not_null())
    if f.height == 0:
        return ChunkResult(parsed_lines=pl.Series("line", [], dtype=pl.Int64))
    ev_node = raw.str.extract_groups(EVENT_NODE_RE)
    node = pl.coalesce(
        ev_node.struct.field("obj"),
        ev_node.struct.field("msg"),
        pl.when(pl.col("_kubelet") != "").then(pl.col("_kubelet")),
        pl.when(pl.col("_cond").struct.field("cond").is_not_null()).then(pl.col("_described")),
    )
    transition = pl.col("_cond").struct.field("transition")
    ts = transition.str.to_datetime("%a, %d %b %Y %H:%M:%S %z", strict=False)
    kinds = {k: v[0].value for k, v in _KIND.items()}
    severities = {k: v[1].value for k, v in _KIND.items()}
    sub = pl.col("_sub")
    boot = raw.str.extract(BOOT_ID_RE, 1)
    reason = pl.coalesce(pl.col("_ev").struct.field("reason"), pl.col("_cond").struct.field("why"))
    attrs = pl.struct(reason.alias("reason"), boot.alias("boot_id")).struct.json_encode()
    events = f.select(
        ts=ts.dt.convert_time_zone("UTC").dt.replace_time_zone(None).cast(pl.Datetime("us")),
        ts_flag=pl.when(ts.is_null()).then(pl.lit("no_ts")),
        node=node_expr(node),
        source=pl.lit(Source.K8S.value),
        kind=sub.replace_strict(kinds, return_dtype=pl.String),
        subkind=sub,
        severity=sub.replace_strict(severities, return_dtype=pl.String),
        message=raw.str.strip_chars().str.slice(0, 2000),
        attrs=attrs.str.replace_all(r',?"[a-z_]+":null', "").str.replace(r"^\{,", "{"),
        file=pl.lit(ctx.file),
        line=pl.col("line"),
    )
    events = events.select(
        [
            (pl.col(c) if c in events.columns else pl.lit(None)).cast(t).alias(c)
            for c, t in EVENTS.polars_schema.items()
        ]
    )
    return ChunkResult(
        tables={"events": events},
        parsed=events.height,
        parsed_lines=events.get_column("line"),
    )

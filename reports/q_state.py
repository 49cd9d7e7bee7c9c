"""What needs a human now: each node's state, the open incidents, and how honest the window is.

``fleet_state`` colours every node healthy / degraded / at risk / drained / down from its last
Slurm state event, the newest prediction run and its warning-or-worse events; ``incidents`` groups
those events one row per node or job and cause (never one per rank), with the Xid catalog's
action and runbook line; ``data_span`` and ``unplaced_events`` say what the data covers and which
events have no time or no node (they are shown in their own panel, never dropped unseen).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

import polars as pl

from faultlens.ingest.store import Store
from faultlens.reports import rollups
from faultlens.reports.filters import Filters, cluster_of

WATCH_THRESHOLD = 0.5  # a prediction at or above it puts the node on the watch list ("at risk")
INCIDENT_SEVERITIES = ("error", "critical")
# sources whose events are one line per rank: grouped per job when the job is known
RANK_SOURCES = ("nccl", "pytorch", "training")


class NodeState(StrEnum):
    HEALTHY = "healthy"
    DEGRADED = "degraded"
    AT_RISK = "at risk"
    DRAINED = "drained"
    DOWN = "down"


STATE_ORDER = (
    NodeState.DOWN,
    NodeState.DRAINED,
    NodeState.AT_RISK,
    NodeState.DEGRADED,
    NodeState.HEALTHY,
)
SLURM_STATE = {
    "node_down": NodeState.DOWN,
    "node_not_responding": NodeState.DOWN,
    "node_drain": NodeState.DRAINED,
}
# The first action and runbook line for incident kinds that carry no Xid code.
KIND_RUNBOOK: dict[str, tuple[str, str]] = {
    "nccl_timeout": (
        "restart_app",
        "Collective timed out: find the rank that stopped first (its node's kernel log and NCCL "
        "lines), drain that node if it shows hardware errors, then restart from the checkpoint.",
    ),
    "nccl_error": (
        "restart_app",
        "NCCL reported an error: check the IB/RoCE port and cable of the named device "
        "(ibstat, link counters); repeated on one node means drain it.",
    ),
    "process_failed": (
        "restart_app",
        "A training rank exited: its traceback names the cause; a CUDA error next to an Xid "
        "points at the GPU.",
    ),
    "node_down": (
        "reboot_node",
        "Slurm lost the node: check power and the BMC, reboot, run dcgmi diag -r 3 before "
        "resuming.",
    ),
    "node_not_responding": (
        "reboot_node",
        "slurmd stopped answering: check the host (console, BMC), then reboot.",
    ),
    "ecc": (
        "reset_gpu",
        "ECC errors: check retired pages / row remapping (nvidia-smi -q -d ROW_REMAPPER); "
        "replace the GPU if remapping failed.",
    ),
    "fallen_off_bus": (
        "drain_node",
        "GPU fell off the bus: drain, reseat or replace the GPU; check PCIe and power.",
    ),
    "pcie": ("drain_node", "PCIe AER errors: check the slot, riser and link width."),
    "thermal": ("drain_node", "Thermal event: check fans, airflow and the inlet temperature."),
}
DEFAULT_RUNBOOK = ("none", "Look at the evidence lines; no catalog entry for this kind.")


def _node_groups(store: Store, nodes: list[str]) -> dict[str, str]:
    """Each node's partition (its most frequent in Slurm jobs), else its name's cluster."""
    frame = store.query(
        "SELECT n AS node, mode(partition) AS partition FROM "
        "(SELECT unnest(nodes) AS n, partition FROM jobs WHERE partition IS NOT NULL) "
        "GROUP BY n"
    )
    part = dict(zip(frame["node"].to_list(), frame["partition"].to_list(), strict=True))
    return {n: part.get(n) or cluster_of(n) for n in nodes}


def _last_slurm_state(store: Store, f: Filters) -> pl.DataFrame:
    kinds = [*SLURM_STATE, "node_resume"]
    table = "rollup_notable" if rollups.available(store) else "events"
    hi = f.until or datetime(9999, 1, 1)
    return store.query(
        "SELECT node, arg_max(kind, ts) AS kind, max(ts) AS ts FROM "
        f"{table} WHERE kind IN (SELECT unnest(?::VARCHAR[])) AND ts < ? AND node IS NOT NULL "
        "GROUP BY node",
        [kinds, hi],
    )


def _issues(store: Store, f: Filters, since_resume: pl.DataFrame) -> pl.DataFrame:
    """Per node: error / critical events in the range after its last resume, and per GPU."""
    table = "rollup_notable" if rollups.available(store) else "events"
    where, params = Filters(since=f.since, until=f.until).events_where("e")
    frame = store.query(
        "SELECT e.node, coalesce(e.gpu, '') AS gpu, count(*) AS n, max(e.ts) AS last, "
        "string_agg(DISTINCT e.kind || coalesce(' ' || e.code::VARCHAR, ''), ', ' "
        "ORDER BY e.kind || coalesce(' ' || e.code::VARCHAR, '')) AS what "
        f"FROM {table} e WHERE {where} AND e.node IS NOT NULL "
        "AND e.severity IN (SELECT unnest(?::VARCHAR[])) GROUP BY ALL",
        [*params, list(INCIDENT_SEVERITIES)],
    )
    if frame.height and since_resume.height:
        frame = (
            frame.join(since_resume.select("node", "resumed"), on="node", how="left")
            .filter(pl.col("resumed").is_null() | (pl.col("last") > pl.col("resumed")))
            .drop("resumed")
        )
    return frame


def fleet_state(
    store: Store, f: Filters, all_nodes: list[str], watch: float = WATCH_THRESHOLD
) -> pl.DataFrame:
    """One row per node: ``group`` (partition or cluster), ``state``, ``reason``, ``gpus`` (the
    hover text: GPUs with their issues) and ``score`` (newest prediction, or null)."""
    from faultlens.reports.q_fleet import latest_predictions

    nodes = [n for n in all_nodes if not f.nodes or n in f.nodes]
    slurm = _last_slurm_state(store, f)
    resumed = slurm.filter(pl.col("kind") == "node_resume").select(
        "node", pl.col("ts").alias("resumed")
    )
    issues = _issues(store, f, resumed)
    risk = latest_predictions(store, Filters(until=f.until), n=100_000)
    score = risk.group_by("node").agg(pl.col("score").max()) if risk.height else risk
    scores = dict(zip(score["node"].to_list(), score["score"].to_list(), strict=True))
    slurm_of = {r["node"]: r for r in slurm.iter_rows(named=True) if r["kind"] in SLURM_STATE}
    by_node: dict[str, list[dict[str, Any]]] = {}
    # newest first; the same order on every run (equal times by GPU)
    for r in issues.sort(["last", "gpu"], descending=[True, False]).iter_rows(named=True):
        by_node.setdefault(r["node"], []).append(r)
    groups = _node_groups(store, nodes)
    rows = []
    for node in nodes:
        state, reason = _state_of(node, slurm_of, scores, by_node, watch)
        rows.append(
            {
                "group": groups[node],
                "node": node,
                "state": state.value,
                "reason": reason,
                "gpus": _gpu_text(by_node.get(node, [])),
                "score": scores.get(node),
            }
        )
    return pl.DataFrame(
        rows,
        schema={
            "group": pl.String,
            "node": pl.String,
            "state": pl.String,
            "reason": pl.String,
            "gpus": pl.String,
            "score": pl.Float64,
        },
    )


def _state_of(
    node: str,
    slurm_of: dict[str, dict[str, Any]],
    scores: dict[str, float],
    by_node: dict[str, list[dict[str, Any]]],
    watch: float,
) -> tuple[NodeState, str]:
    if node in slurm_of:
        r = slurm_of[node]
        return SLURM_STATE[r["kind"]], f"{r['kind']} at {r['ts']:%Y-%m-%d %H:%M}"
    score = scores.get(node)
    if score is not None and score >= watch:
        return NodeState.AT_RISK, f"failure risk {score:.2f} (watch at {watch:.2f})"
    issues = by_node.get(node)
    if issues:
        n = sum(int(i["n"]) for i in issues)
        return NodeState.DEGRADED, f"{n} error/critical events: {issues[0]['what']}"
    return NodeState.HEALTHY, "no error or critical event in the range"


def _gpu_text(issues: list[dict[str, Any]]) -> str:
    parts = [
        f"{'gpu ' + i['gpu'] if i['gpu'] else 'node'}: {i['what']} ×{i['n']}" for i in issues[:8]
    ]
    return "<br>".join(parts) if parts else "no GPU issues"


def state_counts(state: pl.DataFrame) -> dict[str, int]:
    """Nodes per state, every state present (zero included), in ``STATE_ORDER``."""
    counts = dict(state.group_by("state").len().iter_rows()) if state.height else {}
    return {s.value: int(counts.get(s.value, 0)) for s in STATE_ORDER}


# -- incidents -------------------------------------------------------------------------------------
def incidents(
    store: Store, f: Filters, *, severities: tuple[str, ...] = INCIDENT_SEVERITIES, limit: int = 50
) -> pl.DataFrame:
    """Warning-or-worse events of the range grouped one row per node (or job, for per-rank
    sources; or file, for node-less lines) and cause: count, first / last seen, the ranks (node
    and GPU pairs) affected, the first event's file and line, the suggested action and runbook."""
    table = "rollup_notable" if rollups.available(store) else "events"
    where, params = f.events_where("e")
    frame = store.query(
        f"""
        WITH g AS (
            SELECT CASE WHEN e.job_id IS NOT NULL AND e.source IN (SELECT unnest(?::VARCHAR[]))
                        THEN 'job ' || e.job_id
                        ELSE coalesce(e.node, 'file ' || coalesce(e.file, '?')) END AS subject,
                   e.*
            FROM {table} e WHERE {where} AND e.severity IN (SELECT unnest(?::VARCHAR[]))
        )
        SELECT subject, kind, code,
               min(CASE severity WHEN 'critical' THEN 0 WHEN 'error' THEN 1 ELSE 2 END) AS rank_,
               CASE rank_ WHEN 0 THEN 'critical' WHEN 1 THEN 'error' ELSE 'warning' END
                   AS severity,
               count(*) AS events,
               min(ts) AS first_seen, max(ts) AS last_seen,
               count(DISTINCT coalesce(node, '') || '/' || coalesce(gpu, '')) AS ranks,
               string_agg(DISTINCT node, ',' ORDER BY node) AS nodes,
               any_value(job_id) AS job_id,
               arg_min(file, coalesce(ts, TIMESTAMP '9999-01-01')) AS file,
               arg_min(line, coalesce(ts, TIMESTAMP '9999-01-01')) AS line,
               arg_min(message, coalesce(ts, TIMESTAMP '9999-01-01')) AS message
        FROM g GROUP BY subject, kind, code
        ORDER BY rank_, last_seen DESC NULLS LAST, subject, kind
        LIMIT ?
        """,
        [list(RANK_SOURCES), *params, list(severities), int(limit)],
    )
    return _with_runbook(store, frame.drop("rank_"))


def _with_runbook(store: Store, frame: pl.DataFrame) -> pl.DataFrame:
    """The cause label, suggested action and runbook line: the Xid catalog's for an Xid code,
    ``KIND_RUNBOOK``'s otherwise."""
    cat = store.query("SELECT xid, name, typical_action, notes FROM xid_catalog")
    by_xid = {
        r["xid"]: (r["name"], r["typical_action"], r["notes"]) for r in cat.iter_rows(named=True)
    }
    causes, actions, books = [], [], []
    for kind, code in zip(frame["kind"].to_list(), frame["code"].to_list(), strict=True):
        entry = by_xid.get(code) if code is not None else None
        if entry is not None:
            name, action, notes = entry
            short = str(name or "").split(" (")[0].removeprefix("ROBUST_CHANNEL_")
            causes.append(f"Xid {code} {short}".strip())
            actions.append(action or "none")
            books.append(notes or "")
        else:
            action, book = KIND_RUNBOOK.get(kind, DEFAULT_RUNBOOK)
            causes.append(f"{kind} {code}" if code is not None else str(kind))
            actions.append(action)
            books.append(book)
    return frame.with_columns(
        pl.Series("cause", causes, pl.String),
        pl.Series("action", actions, pl.String),
        pl.Series("runbook", books, pl.String),
    )


def repeated_events(store: Store, f: Filters, limit: int = 30) -> pl.DataFrame:
    """The report's latest errors, repeated lines grouped (count, first / last, ranks)."""
    frame = incidents(store, f, limit=limit)
    return frame.select(
        "subject",
        "cause",
        "severity",
        "events",
        "ranks",
        "first_seen",
        "last_seen",
        "action",
        pl.concat_str([pl.col("file"), pl.col("line").cast(pl.String)], separator=":").alias(
            "evidence"
        ),
        "message",
    )


# -- honest windows --------------------------------------------------------------------------------
def data_span(store: Store) -> pl.DataFrame:
    """Per source: events, first and newest stamp, and how many have no time or no node."""
    per_source = (  # the node-day rollup keeps exactly these (an undated event has no day)
        "SELECT source, sum(n)::BIGINT AS events, min(first_ts) AS first, max(last_ts) AS newest, "
        "coalesce(sum(n) FILTER (WHERE day IS NULL), 0)::BIGINT AS undated, "
        "coalesce(sum(n) FILTER (WHERE node IS NULL), 0)::BIGINT AS no_node "
        "FROM rollup_node_day GROUP BY source "
        if rollups.available(store)
        else "SELECT source, count(*) AS events, min(ts) AS first, max(ts) AS newest, "
        "count(*) FILTER (WHERE ts IS NULL) AS undated, "
        "count(*) FILTER (WHERE node IS NULL) AS no_node "
        "FROM events GROUP BY source "
    )
    return store.query(
        per_source
        + "UNION ALL SELECT 'slurm jobs', count(*), min(start), max(coalesce(\"end\", start)), "
        "count(*) FILTER (WHERE start IS NULL), 0 FROM jobs HAVING count(*) > 0 "
        "ORDER BY newest DESC NULLS LAST, source"
    )


def unplaced_events(store: Store, limit: int = 200) -> pl.DataFrame:
    """Events without a time or a node, per file and reason, with the command that fixes them."""
    frame = store.query(
        "SELECT file, source, "
        "CASE WHEN ts IS NULL AND node IS NULL THEN 'no time, no node' "
        "WHEN ts IS NULL THEN 'no time' ELSE 'no node' END AS missing, "
        "CASE WHEN ts IS NULL THEN ts_flag END AS ts_flag, count(*) AS events, "
        "min(line) AS first_line "
        "FROM events WHERE ts IS NULL OR node IS NULL GROUP BY ALL "
        "ORDER BY events DESC, file LIMIT ?",
        [int(limit)],
    )
    fixes = [
        _fix_for(f, m, flag)
        for f, m, flag in zip(frame["file"], frame["missing"], frame["ts_flag"], strict=True)
    ]
    return frame.with_columns(pl.Series("fix", fixes, pl.String))


# Why a time is missing (``events.ts_flag``) -> what places it: an option of a re-read, or what to
# change where the lines are written when no option can (None: a boot-relative or unknown stamp)
_TIME_FIXES: dict[str | None, str] = {
    None: "--boot-time 'YYYY-MM-DD HH:MM:SS'",
    "boot_relative": "--boot-time 'YYYY-MM-DD HH:MM:SS'",
    "no_year": "--year YYYY",
    # a time the zone skipped (the stamps are another zone's), or a zone abbreviation read
    # once the nodes' zone is known
    "tz_gap": "--tz ZONE",
    "tz_unknown": "--tz ZONE",
}
_TIME_CAUSES = {
    "no_ts": "the lines carry no time",
    "tz_ambiguous": "a wall-clock time the zone showed twice (clocks turned back): log in UTC "
    "or with an offset (rsyslog RFC 3339, journalctl --utc)",
    "cpu_clock": "Slurm's LogTimeFormat=clock is CPU time: set LogTimeFormat=iso8601_ms",
    "relative_time": "Slurm wrote relative times: list again with SLURM_TIME_FORMAT=standard",
    "date_only": "a date without a time: list again with SLURM_TIME_FORMAT=standard",
    "ambiguous_date": "day and month cannot be told apart: SLURM_TIME_FORMAT=standard",
    "unreadable_time": "a time in no known form: list again with SLURM_TIME_FORMAT=standard",
}


def _fix_for(file: str | None, missing: str, flag: str | None = None) -> str:
    """The re-read that places these events, or what to change at the source when no option of
    a re-read can (a cause in brackets after the command, or alone)."""
    opts, cause = [], None
    if "no time" in missing:
        if flag in _TIME_FIXES:
            opts.append(_TIME_FIXES[flag])
        else:
            cause = _TIME_CAUSES.get(flag or "", f"no time ({flag})")
    if "no node" in missing:
        opts.append("--node NODE")
    if not opts:
        return f"({cause})"
    command = f"faultlens ingest --reparse {file or 'PATH'} " + " ".join(opts)
    return f"{command} ({cause})" if cause else command

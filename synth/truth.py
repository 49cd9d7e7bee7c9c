"""The ground-truth file: what really happened, so that any evaluation can be recomputed.

``ground_truth.json`` holds ``config`` and ``cause_mix`` (configured shares), ``failures`` (one row
per root-cause failure; a leaf-switch failure is one row with all its ``nodes``), ``interruptions``
(jobs killed by a failure), ``precursors`` (precursor events, tied to a failure or ``null`` for
benign ones), ``lemon_nodes``, ``stragglers`` (from ``synth.training`` when it exists), ``summary``
(counts and rates), and ``jobs_by_state``.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from faultlens.synth.cluster import Failure, Job, Node
from faultlens.synth.config import SynthConfig
from faultlens.synth.failures import KEvent

# Which precursor template keys are which event kinds (ingest.schema.Kind vocabulary) and codes.
PRECURSOR_KIND: dict[str, tuple[str, int | None]] = {
    "xid92": ("ecc", 92),
    "xid63": ("row_remap", 63),
    "xid94": ("ecc", 94),
    "xid94_sram": ("ecc", 94),
    "nvlink_nonfatal": ("nvlink", None),
    "xid119": ("gsp_timeout", 119),
    "aer_corrected": ("pcie", None),
    "ib_flap": ("ib_port", None),
    "mlx5_module_temp": ("ib_port", None),
    "nvme_timeout": ("storage", None),
    "mce_corrected": ("mce", None),
    "edac_ce": ("memory", None),
    "thermal_only": ("thermal", None),
    "cpu_throttle": ("thermal", None),
    "hung_task": ("hung_task", None),
}


def _iso(origin: datetime, seconds: float) -> str:
    return (origin + timedelta(seconds=seconds)).isoformat(timespec="microseconds")


def failure_rows(
    config: SynthConfig, failures: list[Failure], nodes: list[Node]
) -> list[dict[str, Any]]:
    shadows: dict[int, list[str]] = {}
    for f in failures:
        if f.primary is not None:
            shadows.setdefault(f.primary.fid, []).append(nodes[f.node].name)
    rows = []
    for f in failures:
        if f.primary is not None:
            continue
        node = nodes[f.node]
        rows.append(
            {
                "id": f.fid,
                "ts": _iso(config.start, f.ts_s),
                "node": node.name,
                "gpu": node.gpus[f.gpu].pci_bus_id if f.gpu is not None else None,
                "gpu_index": f.gpu,
                "cause": f.cause.name,
                "category": str(f.cause.category),
                "variant": f.variant or None,
                "job_id": f.job_id,
                "lemon": node.lemon,
                "repair_h": round(f.repair_s / 3600, 3),
                "has_precursors": f.has_precursors,
                "nodes": [node.name] + shadows.get(f.fid, []),
                "leaf": f.leaf,
            }
        )
    return rows


def interruption_rows(
    config: SynthConfig, jobs: list[Job], failures: list[Failure]
) -> list[dict[str, Any]]:
    by_job: dict[int, Failure] = {id(f.job): f for f in failures if f.job is not None}
    rows = []
    for job in jobs:
        if job.failure_cause is None or job.end_s is None or job.failure_ts_s is None:
            continue
        f = by_job.get(id(job))
        primary = f.primary if f is not None and f.primary is not None else f
        rows.append(
            {
                "ts": _iso(config.start, job.failure_ts_s),
                "job_id": job.job_id,
                "node": job.failure_node,
                "gpu_index": job.failure_gpu,
                "cause": job.failure_cause,
                "category": str(f.cause.category) if f else None,
                "failure_id": primary.fid if primary is not None else None,
                "state": job.state,
                "start": _iso(config.start, job.start_s),
                "end": _iso(config.start, job.end_s),
                "n_nodes": len(job.nodes),
                "n_gpus": job.n_gpus,
                "gpu_hours": round((job.end_s - job.start_s) / 3600 * job.n_gpus, 3),
            }
        )
    rows.sort(key=lambda r: r["ts"])
    return rows


def precursor_rows(
    config: SynthConfig, events: list[KEvent], nodes: list[Node]
) -> list[dict[str, Any]]:
    rows = []
    for ev in events:
        if ev.key not in PRECURSOR_KIND or (ev.fid is not None and not ev.precursor):
            continue
        kind, code = PRECURSOR_KIND[ev.key]
        node = nodes[ev.node]
        rows.append(
            {
                "ts": _iso(config.start, ev.ts_s),
                "node": node.name,
                "gpu": node.gpus[ev.gpu].pci_bus_id if ev.gpu is not None else None,
                "kind": kind,
                "code": code,
                "template": ev.key,
                "failure_id": ev.fid if ev.precursor else None,
                "source": "telemetry" if ev.key == "thermal_only" else "kernel",
            }
        )
    rows.sort(key=lambda r: (r["ts"], r["node"]))
    return rows


def build_truth(
    config: SynthConfig,
    nodes: list[Node],
    jobs: list[Job],
    failures: list[Failure],
    events: list[KEvent],
    stragglers: list[dict[str, Any]],
) -> dict[str, Any]:
    fails = failure_rows(config, failures, nodes)
    inter = interruption_rows(config, jobs, failures)
    gpu_days = config.node_days * config.gpus_per_node
    summary = {
        "window": [
            config.start.isoformat(),
            (config.start + timedelta(days=config.days)).isoformat(),
        ],
        "node_days": config.node_days,
        "gpu_days": gpu_days,
        "n_failures": len(fails),
        "n_interruptions": len(inter),
        "n_jobs": len({j.job_id for j in jobs}),
        "n_job_records": len(jobs),
        "failures_per_1000_node_days": round(len(fails) / config.node_days * 1000, 4),
        "failures_per_gpu_day": len(fails) / gpu_days,
        "failures_by_cause": dict(Counter(f["cause"] for f in fails).most_common()),
        "failures_by_category": dict(Counter(f["category"] for f in fails).most_common()),
        "failures_on_lemons": sum(1 for f in fails if f["lemon"]),
    }
    return {
        "config": config.to_json(),
        "cause_mix": config.cause_mix(),
        "summary": summary,
        "failures": fails,
        "interruptions": inter,
        "stragglers": stragglers,
        "precursors": precursor_rows(config, events, nodes),
        "lemon_nodes": [n.name for n in nodes if n.lemon],
        "nodes": [
            {
                "node": n.name,
                "leaf": n.leaf,
                "log_format": n.log_format,
                "gpu_model": n.gpu_model,
                "lemon": n.lemon,
            }
            for n in nodes
        ],
        "jobs_by_state": dict(Counter(_state_key(j.state) for j in jobs).most_common()),
    }


def _state_key(state: str) -> str:
    return "CANCELLED" if state.startswith("CANCELLED") else state


def write_truth(truth: dict[str, Any], out_dir: Path) -> Path:
    path = out_dir / "ground_truth.json"
    path.write_text(json.dumps(truth, indent=1, sort_keys=False) + "\n")
    return path

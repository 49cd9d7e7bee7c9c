"""A small database with a known story, for the report and dashboard tests (timeline constants).

Six nodes in two clusters (``gpu`` and ``dgx-b``) over one week from ``START``:
gpu002 loses a GPU (Xid 79) which kills job 102 and is drained, then has a double-bit ECC error
(Xid 48) three days later; dgx-b-01 has an uncontained ECC error (Xid 95) that fails job 103; gpu003
logs application Xid 13 three times; one log line carries a ``<script>`` tag.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl

from faultlens.ingest.catalog import load_catalog
from faultlens.ingest.store import Store

START = datetime(2025, 3, 1)
END = START + timedelta(days=7)
NODES = ("gpu001", "gpu002", "gpu003", "gpu004", "dgx-b-01", "dgx-b-02")
XID79_TS = START + timedelta(days=2, hours=10)
XID48_TS = START + timedelta(days=5, hours=3)
XID95_TS = START + timedelta(days=6)
SCRIPT_LINE = "NVRM: <script>alert('x')</script> Xid 13 injected"
FAILURES = 3  # episodes: gpu002 Xid 79 (+ job 102), gpu002 Xid 48, dgx-b-01 Xid 95
PRED_MADE_AT = START + timedelta(days=6, hours=12)
RISKY_NODE, RISKY_SCORE = "gpu002", 0.91
QUARANTINED = 2


def _event(
    ts: datetime,
    node: str,
    kind: str,
    severity: str,
    message: str,
    *,
    code: int | None = None,
    gpu: str | None = None,
    source: str = "kernel",
    job_id: str | None = None,
    line: int = 1,
) -> dict:
    return {
        "ts": ts,
        "node": node,
        "gpu": gpu,
        "source": source,
        "kind": kind,
        "code": code,
        "severity": severity,
        "job_id": job_id,
        "message": message,
        "file": f"/logs/{node}/kern.log",
        "line": line,
    }


def events() -> list[dict]:
    d = timedelta(days=1)
    rows = [
        _event(
            XID79_TS,
            "gpu002",
            "xid",
            "critical",
            "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
            code=79,
            gpu="0000:3b:00.0",
            line=10,
        ),
        _event(
            XID79_TS + timedelta(minutes=5),
            "gpu002",
            "node_drain",
            "warning",
            "node gpu002 drained: Xid 79",
            source="slurm",
            line=11,
        ),
        _event(
            XID79_TS + timedelta(hours=4),
            "gpu002",
            "node_resume",
            "info",
            "node resumed",
            source="slurm",
            line=12,
        ),
        _event(
            XID48_TS,
            "gpu002",
            "xid",
            "critical",
            "NVRM: Xid (PCI:0000:3b:00): 48, DBE",
            code=48,
            gpu="0000:3b:00.0",
            line=20,
        ),
        _event(
            XID95_TS,
            "dgx-b-01",
            "xid",
            "critical",
            "NVRM: Xid (PCI:0000:1a:00): 95, Uncontained ECC error",
            code=95,
            gpu="0000:1a:00.0",
            line=30,
        ),
        _event(
            START + 3 * d,
            "gpu001",
            "nccl_timeout",
            "error",
            "Watchdog caught collective operation timeout",
            source="nccl",
            job_id="101",
            line=40,
        ),
    ]
    for i in range(3):
        rows.append(
            _event(
                START + (i + 1) * d,
                "gpu003",
                "xid",
                "error" if i == 0 else "warning",
                SCRIPT_LINE if i == 0 else "NVRM: Xid (PCI:0000:5d:00): 13, Graphics Exception",
                code=13,
                gpu="0000:5d:00.0",
                line=50 + i,
            )
        )
    for i, node in enumerate(NODES):  # one info event per node and day, so every node is seen
        for k in range(7):
            rows.append(
                _event(
                    START + k * d + timedelta(hours=1),
                    node,
                    "diag",
                    "info",
                    f"dcgmi diag pass {node}",
                    source="dcgm",
                    line=100 + i * 7 + k,
                )
            )
    return rows


def jobs() -> list[dict]:
    def job(job_id: str, nodes: list[str], start: datetime, end: datetime, state: str) -> dict:
        return {
            "job_id": job_id,
            "name": f"train-{job_id}",
            "user": "alice",
            "partition": "gpu",
            "nodes": nodes,
            "n_nodes": len(nodes),
            "n_gpus": 8 * len(nodes),
            "start": start,
            "end": end,
            "elapsed_s": (end - start).total_seconds(),
            "state": state,
            "source": "slurm",
            "file": "/logs/sacct.txt",
            "line": 1,
        }

    return [
        job("101", ["gpu001", "gpu004"], START, START + timedelta(days=4), "COMPLETED"),
        job(
            "102",
            ["gpu002", "gpu003"],
            START + timedelta(days=1),
            XID79_TS + timedelta(minutes=1),
            "NODE_FAIL",
        ),
        job(
            "103",
            ["dgx-b-01"],
            START + timedelta(days=5),
            XID95_TS + timedelta(minutes=5),
            "FAILED",
        ),
    ]


def attributions() -> list[dict]:
    return [
        {
            "job_id": "102",
            "state": "NODE_FAIL",
            "end": XID79_TS + timedelta(minutes=1),
            "node": "gpu002",
            "cause": "gpu_hardware",
            "evidence_kind": "xid",
            "evidence_code": 79,
            "evidence_ts": XID79_TS,
            "gpu_hours_lost": 16 * 34.0,
        },
        {
            "job_id": "103",
            "state": "FAILED",
            "end": XID95_TS + timedelta(minutes=5),
            "node": "dgx-b-01",
            "cause": "gpu_memory",
            "evidence_kind": "xid",
            "evidence_code": 95,
            "evidence_ts": XID95_TS,
            "gpu_hours_lost": 8 * 24.0,
        },
    ]


def telemetry() -> pl.DataFrame:
    rows = []
    for h in range(7 * 24):
        for gpu in (0, 1):
            rows.append(
                {
                    "ts": START + timedelta(hours=h),
                    "node": "gpu002",
                    "gpu": gpu,
                    "metric": "DCGM_FI_DEV_GPU_TEMP",
                    "value": 60.0 + gpu * 10,
                }
            )
    return pl.DataFrame(rows)


def predictions() -> list[dict]:
    reasons = json.dumps([{"feature": "xid_critical_24h", "value": 2, "contribution": 1.7}])
    base = {
        "run_id": "run-1",
        "made_at": PRED_MADE_AT,
        "target": "failure",
        "horizon": 24.0,
        "model_version": "failure-test",
        "top_features": reasons,
    }
    return [
        {**base, "node": RISKY_NODE, "gpu": None, "score": RISKY_SCORE, "action": "drain_node"},
        {**base, "node": "gpu003", "gpu": None, "score": 0.2, "action": "none"},
    ]


def build(path: Path) -> Path:
    with Store(path) as store:
        store.load_xid_catalog(load_catalog(None))
        store.insert("events", pl.DataFrame(events()))
        store.insert("jobs", pl.DataFrame(jobs()))
        store.insert("attributions", pl.DataFrame(attributions()))
        store.insert("telemetry", telemetry())
        store.insert("predictions", pl.DataFrame(predictions()))
        store.insert(
            "quarantine",
            pl.DataFrame(
                [
                    {
                        "file": "/logs/gpu003/kern.log",
                        "line": 7,
                        "raw": "NVRM: Xid <b>garbled",
                        "reason": "xid line without a code",
                    },
                    {
                        "file": "/logs/gpu003/kern.log",
                        "line": 8,
                        "raw": "NCCL WARN ???",
                        "reason": "nccl warn without a message",
                    },
                ]
            ),
        )
        store.insert(
            "ingested_files",
            pl.DataFrame(
                [
                    {
                        "path": "/logs/gpu003/kern.log",
                        "format": "kernel",
                        "status": "ok",
                        "lines": 120,
                        "parsed": 60,
                        "noise": 58,
                        "quarantined": 2,
                        "bytes": 9000,
                    },
                    {
                        "path": "/logs/sacct.txt",
                        "format": "slurm_sacct",
                        "status": "ok",
                        "lines": 4,
                        "parsed": 3,
                        "noise": 1,
                        "quarantined": 0,
                        "bytes": 400,
                    },
                ]
            ),
        )
    return path

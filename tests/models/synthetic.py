"""Small event tables for the failure-prediction tests (until then not from log files).

``insert_events`` writes hand-written timelines; ``random_cluster`` draws a small cluster whose
hardware failures are announced by precursor events hours before (and whose benign episodes look
like precursors but lead nowhere), so that a model has something to learn and the rule baselines
have something to get wrong.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import polars as pl

from faultlens.ingest.store import Store

T0 = datetime(2025, 3, 1)


def insert_events(store: Store, rows: list[dict]) -> None:
    frame = pl.DataFrame(rows, infer_schema_length=None)
    if "source" not in frame.columns:
        frame = frame.with_columns(pl.lit("kernel").alias("source"))
    store.insert("events", frame)


def insert_gpus(store: Store, nodes: list[str], n_gpus: int = 8) -> None:
    store.insert(
        "gpus",
        pl.DataFrame(
            {
                "node": [n for n in nodes for _ in range(n_gpus)],
                "gpu_index": [g for _ in nodes for g in range(n_gpus)],
                "pci_bus_id": [f"0000:{0x18 + g:02x}:00.0" for _ in nodes for g in range(n_gpus)],
            }
        ),
    )


def random_cluster(
    store: Store, *, n_nodes: int = 60, days: int = 40, seed: int = 0, start: datetime = T0
) -> dict:
    """Insert a random cluster; returns its ground truth (failure times per node)."""
    rng = np.random.default_rng(seed)
    nodes = [f"node{i:03d}" for i in range(n_nodes)]
    insert_gpus(store, nodes)
    hours = days * 24
    lemon = rng.random(n_nodes) < 0.1
    rate = np.where(lemon, 1 / 120.0, 1 / 900.0)  # failures per node-hour
    rows: list[tuple] = []
    failures = []
    for i, node in enumerate(nodes):
        t_fail = np.cumsum(rng.exponential(1 / rate[i], size=20))
        t_fail = t_fail[(t_fail > 12) & (t_fail < hours)]
        for tf in t_fail:
            gpu = int(rng.integers(8))
            lead = rng.uniform(3, 20)
            for k in range(int(rng.integers(3, 7))):  # precursors: correctable ECC, Xid 92 / 63
                ts = tf - lead * (1 - k / 8)
                code = int(rng.choice([92, 63, 92]))
                rows.append((ts, node, gpu, "xid", code, "info"))
            code = int(rng.choice([79, 48, 95]))
            rows.append((tf, node, gpu, "xid", code, "critical"))
            failures.append((start + timedelta(hours=float(tf)), node, gpu))
        n_benign = rng.poisson(days / 12)
        for tb in rng.uniform(0, hours, size=n_benign):  # one stray precursor, nothing follows
            rows.append((tb, node, int(rng.integers(8)), "xid", 92, "info"))
        n_app = rng.poisson(days / 3)
        for ta in rng.uniform(0, hours, size=n_app):  # application Xids and NCCL noise
            rows.append(
                (ta, node, int(rng.integers(8)), "xid", int(rng.choice([13, 31, 43])), "warning")
            )
        if lemon[i]:
            for tb in rng.uniform(0, hours, size=days // 2):  # lemons: critical Xids that heal
                rows.append((tb, node, int(rng.integers(8)), "xid", 74, "error"))
    hrs, node_col, gpu_col, kind, code, sev = zip(*rows, strict=True)
    frame = pl.DataFrame(
        {
            "ts": [start + timedelta(hours=float(h)) for h in hrs],
            "node": node_col,
            "gpu_index": gpu_col,
            "gpu": [str(g) for g in gpu_col],
            "kind": kind,
            "code": code,
            "severity": sev,
        }
    ).with_columns(pl.lit("kernel").alias("source"))
    store.insert("events", frame.sort("ts"))
    return {
        "nodes": nodes,
        "lemons": [n for n, f in zip(nodes, lemon, strict=True) if f],
        "failures": failures,
        "start": start,
        "end": start + timedelta(hours=hours),
    }

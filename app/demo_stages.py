"""The demo's analysis stages that belong to no single package: attribution and the fabric.

Each stage is ``stage(store, truth, console)`` and is listed in ``app.demo.STAGES``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
from rich.console import Console

from faultlens.app.common import Table
from faultlens.ingest.attribution import compare_with_truth, mtbf, refresh, taxonomy
from faultlens.ingest.store import Store


def _table(title: str, frame: pl.DataFrame, columns: dict[str, str]) -> Table:
    table = Table(title=title)
    for label in columns.values():
        table.add_column(label)
    for row in frame.iter_rows(named=True):
        table.add_row(*("" if row[c] is None else str(row[c]) for c in columns))
    return table


def stage_attribution(store: Store, truth: dict[str, Any], console: Console) -> None:
    """Join events to GPUs and jobs, attribute failed jobs, print the taxonomy and MTBF."""
    refresh(store)
    frame = store.query("SELECT * FROM attributions")
    tax = taxonomy(store)
    mix = _truth_mix(truth)
    if mix is not None:
        tax = tax.join(mix, on="cause", how="full", coalesce=True).sort(
            "interruptions", descending=True, nulls_last=True
        )
    console.print(
        _table(
            "Job interruptions by root cause (the Llama 3 table shape)",
            tax,
            {
                "cause": "cause",
                "interruptions": "jobs",
                "share_pct": "share %",
                "share_infra_pct": "share of infra %",
                "gpu_hours_lost": "GPU-h of the interrupted runs",
                **({"truth_share_pct": "generator's mix %"} if mix is not None else {}),
            },
        )
    )
    console.print(
        _table(
            "Failures and MTBF",
            mtbf(store),
            {
                "cause": "cause",
                "failures": "failures",
                "per_1000_node_days": "per 1000 node-days",
                "mtbf_node_h": "MTBF per node (h)",
            },
        )
    )
    if truth.get("interruptions"):
        cmp = compare_with_truth(frame, truth["interruptions"])
        hw = cmp["hardware_match"]
        console.print(
            f"attribution vs ground truth: {cmp['match']:.1%} of {cmp['jobs']} interrupted jobs, "
            + (
                f"{hw:.1%} of {cmp['hardware_jobs']} hardware-caused ones"
                if hw is not None
                else "no hardware-caused ones"
            )
        )


def _truth_mix(truth: dict[str, Any]) -> pl.DataFrame | None:
    """The generator's configured share of each cause category, in percent."""
    causes = truth.get("config", {}).get("causes")
    if not causes:
        return None
    frame = pl.DataFrame([{"cause": c["category"], "n": c["count"]} for c in causes])
    frame = frame.group_by("cause").agg(pl.col("n").sum())
    return frame.select(
        "cause", (100.0 * pl.col("n") / pl.col("n").sum()).round(1).alias("truth_share_pct")
    )


def stage_fabric(store: Store, truth: dict[str, Any], console: Console) -> None:
    """Localize network faults with the synthetic cluster's topology file, when there is one."""
    from faultlens.ingest.topology import load_topology, localize_network_faults

    out = truth.get("out")
    topo_path = Path(out) / "topology.csv" if out else None
    topology = load_topology(topo_path) if topo_path and topo_path.exists() else None
    suspects = localize_network_faults(store, topology)
    if suspects.height == 0:
        console.print("network fault localization: no network evidence")
        return
    top = suspects.sort("score", descending=True).head(8)
    console.print(
        _table(
            "Network fault localization (top suspects)",
            top,
            {
                "window_start": "window",
                "component_type": "type",
                "component": "component",
                "nodes_affected": "nodes hit",
                "nodes_total": "nodes behind",
                "score": "score",
            },
        )
    )


def stage_models(store: Store, truth: dict[str, Any], console: Console) -> None:
    """Train the failure model (saved next to the database, where `predict` and the dashboard
    look for it), show it against both baselines, the top at-risk nodes and the lemon list."""
    from faultlens.ingest.errors import ModelError
    from faultlens.models.predictor import demo_stage
    from faultlens.models.registry import default_models_dir

    try:
        demo_stage(store, truth, console, models_dir=default_models_dir(Path(store.path)))
    except ModelError as e:  # a tiny demo cluster may hold too few failures to train on
        console.print(f"failure model: not trained ({e})")

"""The demo's analysis stages: each calls the library, which returns data, and renders it.

Each stage is ``stage(store, truth, console)`` and is listed in ``app.demo.STAGES``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
from rich.console import Console

from faultlens.app.common import Table
from faultlens.ingest.attribution import compare_with_truth, refresh, taxonomy
from faultlens.ingest.store import Store
from faultlens.models.predictor import DemoModels
from faultlens.reports.filters import Filters
from faultlens.reports.reliability import rate_table, rate_text, window_rate


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
    rate = window_rate(store, Filters())  # the data's own span, as `faultlens reliability`
    console.print(
        _table(
            f"Failures and MTBF: {rate_text(rate)} failures per 1000 node-days ({rate.fleet.note})",
            rate_table(rate),
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
    from faultlens.ingest.telemetry.topology import load_topology, localize_network_faults

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
    from faultlens.models.predictor import demo_models
    from faultlens.models.registry import default_models_dir

    known = {str(n) for n in truth.get("lemon_nodes", [])}
    try:
        demo = demo_models(store, known, models_dir=default_models_dir(Path(store.path)))
    except ModelError as e:  # a tiny demo cluster may hold too few failures to train on
        console.print(f"failure model: not trained ({e})")
        return
    console.print(_metrics_table(demo))
    console.print(_risk_table(demo))
    lemons = demo.lemons.head(15)
    lt = Table("rank", "node", "failures", "evidence", "lemon in truth", title="lemon nodes")
    for r in lemons.iter_rows(named=True):
        lt.add_row(
            str(r["rank"]), r["node"], f"{r['failures']:g}", r["evidence"], _yes(r["in_truth"])
        )
    console.print(lt)


def _yes(flag: bool) -> str:
    return "yes" if flag else "-"


def _metrics_table(demo: DemoModels) -> Table:
    from faultlens.app.cmd_models import metrics_table

    card, split = demo.result.card, demo.result.split
    return metrics_table(
        demo.result.metrics,
        f"failure within {card['horizon_h']:g} h, test window "
        f"{split.test[0]:%Y-%m-%d} .. {split.test[1]:%Y-%m-%d}",
    )


def _risk_table(demo: DemoModels) -> Table:
    """The ten riskiest nodes, shown even when none crosses the watch threshold."""
    pred = demo.prediction
    risk = Table(
        "node",
        "gpu",
        "score",
        "action",
        "why",
        title=f"top at-risk nodes as of {pred.as_of:%Y-%m-%d %H:%M} (action none: below the "
        f"watch threshold {demo.result.thresholds.watch:.2f})",
    )
    for a in pred.alerts[:10]:
        why = "; ".join(f["text"] for f in a["top_features"][:3]) or "-"
        risk.add_row(a["node"], a["gpu"] or "-", f"{a['score']:.2f}", a["action"], why)
    return risk


def stage_stragglers(store: Store, truth: dict[str, Any], console: Console) -> None:
    """Top stragglers with cause and cost, next to the ground truth's injected ones."""
    from faultlens.models.stragglers import detect, evaluate

    report = detect(store)
    table = Table(title="Stragglers: detected (worst first)")
    for col in ("job", "node", "gpu", "cause", "slowdown", "wasted GPU-h"):
        table.add_column(col)
    for r in report.stragglers.head(10).iter_rows(named=True):
        table.add_row(
            r["job_id"],
            r["node"],
            "node" if r["gpu"] is None else str(r["gpu"]),
            r["cause"],
            f"{r['slowdown']:.2f}x",
            f"{r['wasted_gpu_h']:.1f}",
        )
    console.print(table)
    true_rows = truth.get("stragglers", []) or []
    if not true_rows:
        console.print(f"{report.stragglers.height} stragglers detected (no ground truth)")
        return
    ev = evaluate(report.stragglers, true_rows)
    errors = [v["rel_error"] for v in ev["wasted"].values() if v["rel_error"] is not None]
    true_wasted = sum(float(t.get("wasted_gpu_h") or 0) for t in true_rows)
    console.print(
        f"stragglers: {ev['detected']} detected / {ev['true']} injected, recall "
        f"{ev['recall']:.0%}, false {ev['false_fraction']:.0%}, cause right "
        f"{ev['cause_accuracy']:.0%}; wasted GPU-h {report.jobs['wasted_gpu_h'].sum():.1f} "
        f"(truth {true_wasted:.1f}), worst job error {max(errors, default=0):.1%}"
    )


def stage_report(store: Store, truth: dict[str, Any], console: Console) -> None:
    """The whole demo history as an HTML report beside the database."""
    from faultlens.reports.build import demo_report

    path = demo_report(store)
    if path is None:
        console.print("report: the demo database is in memory, no report written")
    else:
        console.print(f"report: {path}")

"""The `faultlens demo` stage of the replay engine, and the ranking table the CLI prints."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.table import Table

from faultlens.ingest.store import Store
from faultlens.replay.model import BUCKETS, JobSpec, Trace
from faultlens.replay.score import Score, predictor_value_gpu_h, rank, replay
from faultlens.replay.strategies import STRATEGIES

log = logging.getLogger(__name__)

ALL_STRATEGIES: tuple[str, ...] = tuple(STRATEGIES)
DEMO_STRATEGIES: tuple[str, ...] = (*ALL_STRATEGIES, "hot-spares+in-memory")


def replay_table(scores: Sequence[Score], trace: Trace) -> Table:
    table = Table(
        title=f"replay of {trace.n_events} interruptions over {trace.span_h:.0f} h "
        f"({trace.source}, {trace.fleet_nodes} nodes)"
    )
    for col in (
        "strategy",
        "params",
        "ETTR",
        "95% CI",
        "goodput GPU-h",
        *(b.value for b in BUCKETS),
        "restarts",
        "$ lost",
    ):
        table.add_column(col, justify="left" if col in ("strategy", "params") else "right")
    for s in scores:
        sweep = s.params.get("sweep")
        shown = (
            ", ".join(f"{k}={v:g}" for k, v in sweep.items())
            if sweep
            else f"every {s.params['interval_min']:g} min"
        )
        table.add_row(
            s.name,
            shown,
            f"{s.ettr:.4f}",
            f"{s.ettr_ci[0]:.3f}-{s.ettr_ci[1]:.3f}",
            f"{s.goodput_gpu_h:,.0f}",
            *(f"{s.badput_gpu_h[b.value]:,.0f}" for b in BUCKETS),
            f"{s.restarts:.0f}",
            f"{s.cost_usd:,.0f}",
        )
    return table


def demo_stage(
    store: Store,
    truth: str | Path | dict | None,
    console: Any,
    job: JobSpec | None = None,
    resamples: int = 20,
) -> dict[str, Any]:
    """Rank the strategies on the demo cluster's history and price the failure predictor.

    Reads the interruptions from ``store`` (falling back to the ground-truth file ``truth`` when
    the database has none), prints the ranking to ``console`` and returns it as a dict.
    """
    from faultlens.replay.traces import from_db, from_ground_truth

    job = job or JobSpec()
    trace = from_db(store, alert_threshold=job.alert_threshold)
    if trace.n_events == 0 and isinstance(truth, str | Path) and Path(truth).exists():
        trace = from_ground_truth(truth)
    if trace.n_events == 0:
        console.print("replay: no interruptions recorded, nothing to replay")
        return {"ranking": [], "predictor_value_gpu_h": 0.0, "interruptions": 0}
    ranked = rank(replay(trace, DEMO_STRATEGIES, job, resamples=resamples))
    console.print(replay_table(ranked, trace))
    value = predictor_value_gpu_h(trace, job)
    console.print(
        f"failure predictor: {int(trace.predicted.sum())} of {trace.n_events} interruptions "
        f"predicted, {len(trace.false_alarm_h)} false alarms -> worth {value:,.1f} GPU-hours "
        f"(${value * job.usd_per_gpu_h:,.0f}) against plain checkpointing"
    )
    return {
        "ranking": [s.to_json() for s in ranked],
        "predictor_value_gpu_h": value,
        "interruptions": trace.n_events,
        "best": ranked[0].name,
    }

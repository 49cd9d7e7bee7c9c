"""Rendering of replay results on a terminal (rich): the ranking table and the demo stage."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.table import Table

from faultlens.ingest.store import Store
from faultlens.replay.model import BUCKETS, JobSpec, Trace
from faultlens.replay.ranking import demo_ranking
from faultlens.replay.score import Score


def replay_table(scores: Sequence[Score], trace: Trace) -> Table:
    replacement = scores[0].params.get("replacement", "instant") if scores else "instant"
    table = Table(
        title=f"replay of {trace.n_events} interruptions over {trace.span_h:.0f} h "
        f"({trace.source}, {trace.fleet_nodes} nodes x {trace.gpus_per_node} GPUs, "
        f"replacement {replacement})"
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


def stage_replay(
    store: Store,
    truth: str | Path | dict | None,
    console: Any,
    job: JobSpec | None = None,
    resamples: int = 20,
) -> dict[str, Any]:
    """The demo's replay stage: rank the strategies, print the table and the predictor's value."""
    result = demo_ranking(store, truth, job, resamples)
    if not result.ranked:
        console.print("replay: no interruptions recorded, nothing to replay")
        return result.to_json()
    trace = result.trace
    console.print(replay_table(result.ranked, trace))
    value = result.predictor_value_gpu_h
    unpriced = _no_alert_before(store, trace)
    if unpriced:
        console.print(unpriced)
    else:
        console.print(
            f"failure predictor: {int(trace.predicted.sum())} of {trace.n_events} interruptions "
            f"predicted, {len(trace.false_alarm_h)} false alarms -> worth {value:,.1f} GPU-hours "
            f"(${value * result.usd_per_gpu_h:,.0f}) against plain checkpointing"
        )
    return result.to_json()


def _no_alert_before(store: Store, trace: Trace) -> str | None:
    """Why the predictor cannot be priced on this trace, when no prediction run came before its
    last interruption (a predictive-drain row equal to checkpointing would otherwise read as "the
    predictor is worth nothing"); None when it can."""
    if trace.n_events == 0 or trace.predicted.any() or trace.start is None:
        return None
    first = store.scalar(
        "SELECT min(made_at) FROM predictions WHERE target = 'failure' AND made_at IS NOT NULL"
    )
    last_h = float(trace.t_h.max())
    if first is not None and (first - trace.start).total_seconds() / 3600.0 < last_h:
        return None  # predictions were made in time, and predicted none: a real zero
    since = f"the first at {first:%Y-%m-%d %H:%M}" if first is not None else "none recorded"
    return (
        f"failure predictor: not priced -- no prediction run before any of the {trace.n_events} "
        f"interruptions ({since}); predictive drain is replayed with no alerts, so its row equals "
        "checkpointing. `faultlens run` records a prediction run each time it is scheduled "
        "(README: Operating it); a replay of the weeks after that prices it"
    )

"""The straggler predictor's view, shared by the dashboard's Stragglers page and the report.

``straggler_forecast(store, f)`` runs detection on the range's jobs, then the predictor
(``models.straggler_predict.forecast``): its time-split evaluation beside the "straggled in the
previous window" baseline, and each GPU's latest window scored for the next one.
``fig_straggler_forecast`` draws the GPUs most likely to straggle next; ``section`` is the
report's section.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import plotly.graph_objects as go
import polars as pl

from faultlens.ingest.store import Store
from faultlens.reports.figures import PALETTE, _empty, _layout
from faultlens.reports.filters import Filters

TOP_N = 20


@dataclass(frozen=True)
class StragglerForecast:
    metrics: pl.DataFrame  # scorer, pr_auc, precision, recall (test split)
    next: pl.DataFrame  # job_id, node, gpu, win_start, score: at or above the threshold
    scored: int  # GPUs whose latest window was scored
    threshold: float
    test_window: tuple[str, str]
    positives_test: int
    note: str | None = None  # why there is no forecast


def _empty_forecast(note: str) -> StragglerForecast:
    return StragglerForecast(
        pl.DataFrame(schema={"scorer": pl.String, "pr_auc": pl.Float64}),
        pl.DataFrame(schema={"job_id": pl.String, "node": pl.String, "score": pl.Float64}),
        0,
        0.5,
        ("", ""),
        0,
        note,
    )


def straggler_forecast(store: Store, f: Filters) -> StragglerForecast:
    """The predictor on the jobs that ended after the range's start (one job with ``f.job_id``);
    the node filter selects from its result."""
    from faultlens.models.straggler_predict import forecast
    from faultlens.models.stragglers import detect

    windows = detect(store, job_id=f.job_id, since=f.since).windows
    if windows.height == 0:
        return _empty_forecast("no per-GPU telemetry inside any job window in this range")
    try:
        fc: dict[str, Any] = forecast(windows)
    except ValueError as e:  # too few windows to split in time
        return _empty_forecast(f"straggler prediction needs more windows: {e}")
    ev = fc["evaluation"]
    metrics = pl.DataFrame(
        [
            {
                "scorer": name,
                **{k: round(float(m[k]), 3) for k in ("pr_auc", "precision", "recall")},
            }
            for name, m in ev["metrics"].items()
        ]
    )
    out = StragglerForecast(
        metrics,
        fc["next"],
        int(fc["scored"]),
        float(fc["threshold"]),
        (str(ev["test_window"][0]), str(ev["test_window"][1])),
        int(ev["positives_test"]),
    )
    return narrowed(out, f.nodes) if f.nodes else out


def narrowed(fc: StragglerForecast, nodes: tuple[str, ...]) -> StragglerForecast:
    """The forecast's GPUs on ``nodes`` only (the evaluation stays the range's)."""
    return replace(fc, next=fc.next.filter(pl.col("node").is_in(list(nodes))))


def fig_straggler_forecast(frame: pl.DataFrame) -> go.Figure:
    """The GPUs most likely to straggle in their next window (probability), highest first."""
    title = "Likely to straggle in the next window"
    if frame.height == 0:
        return _empty(title, "no GPU above the threshold")
    top = frame.sort("score", descending=True).head(TOP_N)
    labels = [
        f"{j} {n} gpu{g}"
        for j, n, g in zip(
            top["job_id"].to_list(), top["node"].to_list(), top["gpu"].to_list(), strict=True
        )
    ]
    fig = go.Figure(
        go.Bar(
            x=labels,
            y=top["score"].to_list(),
            marker_color=PALETTE[2],
            hovertemplate="%{x}<br>p = %{y:.2f}<extra></extra>",
        )
    )
    return _layout(fig, title, yaxis_title="probability", yaxis_range=[0, 1])


def numbers(fc: StragglerForecast) -> list[tuple[str, str]]:
    """Headline numbers: GPUs flagged for the next window, and the model's and the baseline's
    test-split PR-AUC."""
    pr = {r["scorer"]: r["pr_auc"] for r in fc.metrics.iter_rows(named=True)}
    out = [("GPUs likely to straggle next", f"{fc.next.height:,} of {fc.scored:,}")]
    for name in ("model", "baseline"):
        if name in pr:
            out.append((f"PR-AUC ({name}, test split)", f"{pr[name]:.3f}"))
    return out


def section(store: Store, f: Filters, fc: StragglerForecast | None = None) -> Any:
    """The report's "Straggler forecast" section (of ``fc`` when given, else computed)."""
    from faultlens.reports.sections import Section  # (sections imports this module's builder)

    fc = fc or straggler_forecast(store, f)
    if fc.note:
        return Section("Straggler forecast", "straggler-forecast", note=fc.note)
    return Section(
        "Straggler forecast",
        "straggler-forecast",
        numbers(fc),
        [fig_straggler_forecast(fc.next)],
        [
            (
                f"Test split {fc.test_window[0]} to {fc.test_window[1]} "
                f"({fc.positives_test} straggling windows): model beside the baseline "
                '"straggled in the previous window"',
                fc.metrics,
            ),
            ("Likely to straggle in the next window", fc.next.head(TOP_N)),
        ],
    )

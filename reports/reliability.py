"""The reliability review: the figures an SRE puts in one (``fig_*(frame) -> go.Figure``, shared by
the dashboard page and the HTML report) and the report section, over ``models.reliability``."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import plotly.graph_objects as go
import polars as pl

from faultlens.ingest.schema import SITE_DATASET
from faultlens.ingest.store import Store
from faultlens.models.fleet import data_window
from faultlens.models.reliability import (
    FailureRate,
    failure_rate_in,
    gaps_per_node,
    km_curves,
    reliability,
)
from faultlens.reports import figures as F
from faultlens.reports import q_fleet
from faultlens.reports.filters import Filters


@dataclass
class ReliabilityView:
    """Everything the page and the section show: the JSON document and the frames to plot."""

    doc: dict[str, Any]
    failures: pl.DataFrame
    gaps_h: np.ndarray
    km: pl.DataFrame

    @property
    def empty(self) -> bool:
        return self.failures.height == 0 and self.km.height == 0


def datasets(store: Store) -> list[str]:
    """The site's own dataset first, then every named one."""
    named = store.query("SELECT DISTINCT dataset FROM dataset_files ORDER BY dataset")
    return [SITE_DATASET, *[d for d in named["dataset"].to_list() if d != SITE_DATASET]]


def reliability_view(
    store: Store,
    dataset: str = SITE_DATASET,
    since: datetime | None = None,
    until: datetime | None = None,
) -> ReliabilityView:
    span = data_window(store, dataset)
    if span is None:
        empty = pl.DataFrame(schema={"node": pl.String, "ts": pl.Datetime("us")})
        return ReliabilityView({}, empty, np.zeros(0), pl.DataFrame())
    window = (since or span[0], until or span[1])
    rel = reliability(store, dataset, window)
    return ReliabilityView(
        rel.to_json(), rel.failures, gaps_per_node(rel.failures), km_curves(store, dataset)
    )


def window_rate(store: Store, f: Filters) -> FailureRate:
    """The site's failure rate over the filters' range and nodes (``models.reliability``'s one
    definition): what the dashboard's overview, the report and the demo print. An open end of
    the range is the data's own (``models.fleet.data_window``); the GPU filter does not narrow
    it (node-days are whole nodes)."""
    span = data_window(store, SITE_DATASET)
    lo = f.since or (span[0] if span else None)
    hi = f.until or (span[1] if span else None)
    window = (lo, hi) if lo is not None and hi is not None else None
    episodes = None
    if window is not None:  # from the rollups where the snapshot has them
        episodes = q_fleet.episodes_in(store, *window)
    return failure_rate_in(store, SITE_DATASET, window, nodes=f.nodes, episodes=episodes)


def rate_text(rate: FailureRate) -> str:
    """The rate as every front end prints it (two decimals; "-" without node-days)."""
    value = rate.per_1000_node_days
    return f"{value:.2f}" if math.isfinite(value) else "-"


def rate_table(rate: FailureRate) -> pl.DataFrame:
    """Per failure category and in all: failures, per 1000 node-days, MTBF per node (h)."""
    frame = rate.failures.group_by(pl.col("category").fill_null("unknown").alias("cause")).len()
    frame = frame.rename({"len": "failures"}).cast({"failures": pl.Int64})
    frame = pl.concat(
        [
            frame.sort("failures", "cause", descending=[True, False]),
            pl.DataFrame({"cause": ["all"], "failures": [rate.n_failures]}).cast(
                {"failures": pl.Int64}
            ),
        ]
    )
    days = rate.node_days
    return frame.with_columns(
        (pl.col("failures") * 1000.0 / days if days > 0 else pl.lit(None, pl.Float64))
        .round(2)
        .alias("per_1000_node_days"),
        pl.when(pl.col("failures") > 0)
        .then(days * 24.0 / pl.col("failures"))
        .round(0)
        .alias("mtbf_node_h"),
    )


# -- figures ---------------------------------------------------------------------------------------
def fig_failure_categories(doc: dict[str, Any]) -> go.Figure:
    rows = doc.get("by_category") or []
    title = "Failures by category (count; MTBF per node in the hover)"
    if not rows:
        return F._empty(title)
    frame = pl.DataFrame(rows).group_by("category").agg(pl.col("count").sum()).sort("count")
    fig = go.Figure(
        go.Bar(
            x=frame["count"].to_list(),
            y=frame["category"].to_list(),
            orientation="h",
            marker_color=F.PALETTE[0],
        )
    )
    return F._layout(fig, title, left=110, xaxis_title="failures")


def fig_repair_times(failures: pl.DataFrame) -> go.Figure:
    title = "Repair time (hours, log scale)"
    r = failures["repair_h"].drop_nulls().drop_nans() if failures.height else pl.Series([])
    r = r.filter(r > 0) if r.len() else r
    if r.len() == 0:
        return F._empty(title, "no repair times recorded")
    fig = go.Figure(go.Histogram(x=np.log10(r.to_numpy()), nbinsx=40, marker_color=F.PALETTE[1]))
    ticks = [v for v in (0.01, 0.1, 1, 10, 100, 1000) if r.min() / 10 <= v <= r.max() * 10]
    fig.update_xaxes(tickvals=[math.log10(v) for v in ticks], ticktext=[f"{v:g}" for v in ticks])
    return F._layout(fig, title, xaxis_title="repair hours", yaxis_title="failures")


def fig_gap_weibull(gaps_h: np.ndarray, doc: dict[str, Any]) -> go.Figure:
    """Survival of the time between failures of a node against the Weibull and exponential fits
    (log-log: a straight line of slope ``shape`` is a Weibull)."""
    from scipy import stats  # on demand: scipy costs a second at import

    title = "Time between failures per node: empirical vs Weibull vs exponential"
    x = np.sort(gaps_h[np.isfinite(gaps_h) & (gaps_h > 0)])
    w = doc.get("weibull") or {}
    if len(x) < 3 or w.get("shape") is None:
        return F._empty(title, "fewer than 3 repeat failures of a node")
    surv = 1.0 - (np.arange(1, len(x) + 1) - 0.5) / len(x)
    step = max(1, len(x) // 400)
    grid = np.geomspace(x[0], x[-1], 80)
    fig = go.Figure()
    fig.add_scatter(
        x=x[::step],
        y=surv[::step],
        mode="markers",
        name="empirical",
        marker={"size": 4, "color": F.PALETTE[0]},
    )
    fig.add_scatter(
        x=grid,
        y=stats.weibull_min.sf(grid, w["shape"], 0, w["scale"]),
        mode="lines",
        name=f"Weibull k={w['shape']:.2f}",
        line={"color": F.PALETTE[1]},
    )
    fig.add_scatter(
        x=grid,
        y=np.exp(-grid / x.mean()),
        mode="lines",
        name="exponential",
        line={"color": F.PALETTE[2], "dash": "dot"},
    )
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    return F._layout(fig, title, xaxis_title="hours", yaxis_title="P(gap > t)")


def fig_survival(km: pl.DataFrame) -> go.Figure:
    title = "Kaplan-Meier survival of units (by batch)"
    if km.height == 0:
        return F._empty(title, "no unit lifetimes in this dataset")
    fig = go.Figure()
    for i, batch in enumerate(sorted(km["batch"].unique().to_list())):
        part = km.filter(pl.col("batch") == batch)
        fig.add_scatter(
            x=(part["time_h"] / 8766.0).to_numpy(),
            y=part["survival"].to_numpy(),
            mode="lines",
            line={"shape": "hv", "color": F.PALETTE[i % 8]},
            name=str(batch),
        )
    return F._layout(fig, title, xaxis_title="years in service", yaxis_title="surviving")


def fig_lemons(failures: pl.DataFrame) -> go.Figure:
    title = "Failures per node, worst first (cumulative share)"
    if failures.height == 0:
        return F._empty(title)
    counts = failures.group_by("node").len().sort("len", descending=True)["len"].to_numpy()
    share = np.cumsum(counts) / counts.sum()
    fig = go.Figure(
        go.Scatter(
            x=np.arange(1, len(share) + 1), y=share, mode="lines", line={"color": F.PALETTE[3]}
        )
    )
    return F._layout(fig, title, xaxis_title="nodes (worst first)", yaxis_title="share of failures")


def figures_of(view: ReliabilityView) -> list[go.Figure]:
    return [
        fig_failure_categories(view.doc),
        fig_repair_times(view.failures),
        fig_gap_weibull(view.gaps_h, view.doc),
        fig_lemons(view.failures),
        fig_survival(view.km),
    ]


def numbers_of(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """The headline figures, formatted once for the page and the report."""
    if not doc:
        return [("Failures", "0")]

    def f(x: Any, spec: str) -> str:
        return "-" if x is None else format(x, spec)

    w = doc["weibull"]
    ci = w["shape_ci"]
    shape = "-" if w["shape"] is None else f"{w['shape']:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]"
    return [
        ("Failures / 1000 node-days", f(doc["failures_per_1000_node_days"], ".2f")),
        ("Failures", f"{doc['incidents']:,}"),
        ("Node-days", f"{doc['node_days']:,.0f}"),
        ("MTBF per node (h)", f(doc["mtbf_h"], ",.0f")),
        ("Median repair (h)", f(doc["repair_h"]["median"], ".2f")),
        ("Weibull shape [95% CI]", shape),
        ("Worst 1.5% of nodes", f(doc["lemon_share"], ".1%")),
    ]


def category_table(doc: dict[str, Any]) -> pl.DataFrame:
    rows = doc.get("by_category") or []
    return pl.DataFrame(rows) if rows else pl.DataFrame()

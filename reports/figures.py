"""The charts, one function each: ``fig_*(frame) -> plotly Figure``, shared by dashboard and report.

Each takes the small frame a query of ``reports.q_fleet`` / ``reports.q_detail`` returns. An empty
frame gives a figure that says there is nothing to show, never an exception.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
import polars as pl

from faultlens.reports.chart_style import (  # shared with the dashboard's Vega-Lite charts
    FEW_SAMPLES,
    MIN_TIME_SPAN,
    PALETTE,
    SEVERITY_COLOR,
    _cut,
    xid_label,
)

HEIGHT = 340


def _lean_template() -> go.layout.Template:
    """``plotly_white`` restricted to the trace types drawn here (bar, scatter): the same look,
    and a fraction of the cost of copying and validating the full template into every figure."""
    white = pio.templates["plotly_white"]
    return go.layout.Template(
        layout=white.layout, data={t: white.data[t] for t in ("bar", "scatter")}
    )


TEMPLATE = _lean_template()
# Every figure starts from this template (plotly copies the default without validating it, a
# tenth of the cost of setting it on each figure); only this module draws figures.
pio.templates["faultlens"] = TEMPLATE
pio.templates.default = "faultlens"


def _layout(
    fig: go.Figure, title: str, *, left: int = 60, right: int = 20, **kw: object
) -> go.Figure:
    """Title, size and fixed margins (``left`` wide enough for the y labels). Margins do not grow
    to fit labels (``autoexpand`` off): plotly would otherwise draw every figure twice, the
    largest part of what a browser spends on a dashboard rerun."""
    legend = {"orientation": "h", "y": -0.32, "yanchor": "top"}
    named = sum(1 for t in fig.data if t.showlegend is not False and t.name)
    if named > 1 and "yaxis2" not in kw:  # (a second y axis holds the right-hand side)
        # a legend of several entries goes right of the plot, one entry a line: below it, a
        # wrapped legend was clipped by the fixed margin and ran into rotated x labels
        legend = {"orientation": "v", "x": 1.02, "xanchor": "left", "y": 1.0, "yanchor": "top"}
        right = max(right, LEGEND_PX)
    fig.update_layout(
        title=title,
        height=HEIGHT,
        margin={"l": left, "r": right, "t": 50, "b": 95, "autoexpand": False},
        legend=legend,
        **kw,
    )
    return fig


LEGEND_PX = 170  # a right-hand legend: symbol and a 20-character name


# Counts go in the hover, not as labels on the bars: plotly measures each label in the browser on
# every redraw (a large part of redrawing a chart after a filter change).
_HOVER = "%{x}<br>%{y}<br>"


def _values(column: pl.Series) -> Any:
    """Numbers and times as a numpy array (plotly takes them without a per-value check), other
    columns as a list."""
    if column.dtype.is_numeric() or column.dtype.is_temporal():
        return column.to_numpy()
    return column.to_list()


def _empty(title: str, what: str = "no data in this range") -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(
        text=what,
        showarrow=False,
        x=0.5,
        y=0.5,
        xref="paper",
        yref="paper",
        font={"size": 14, "color": "#777"},
    )
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return _layout(fig, title)


def _stacked(
    frame: pl.DataFrame, x: str, group: str, y: str, title: str, y_title: str
) -> go.Figure:
    if frame.height == 0:
        return _empty(title)
    fig = go.Figure()
    groups = frame.group_by(group).agg(pl.col(y).sum()).sort(y, descending=True)[group].to_list()
    for i, g in enumerate(groups):
        part = (
            frame.filter(pl.col(group) == g)
            if g is not None
            else frame.filter(pl.col(group).is_null())
        )
        fig.add_bar(
            x=_values(part[x]),
            y=_values(part[y]),
            name=str(g),
            marker_color=PALETTE[i % len(PALETTE)],
        )
    return _layout(fig, title, barmode="stack", yaxis_title=y_title)


# -- overview --------------------------------------------------------------------------------------
def fig_failure_trend(frame: pl.DataFrame) -> go.Figure:
    """Failures per 1000 node-days per period, with the failure count in the hover."""
    title = "Failures per 1000 node-days"
    if frame.height == 0:
        return _empty(title)
    # the failure count is in the hover, not a label on each bar: labels are measured one by one
    # in the browser on every redraw, the largest part of drawing a month of daily bars
    fig = go.Figure(
        go.Bar(
            x=frame["period"].to_list(),
            y=frame["per_1000_node_days"].to_list(),
            customdata=frame["failures"].to_list(),
            marker_color=PALETTE[0],
            name="failures / 1000 node-days",
            hovertemplate="%{x}<br>%{y} per 1000 node-days<br>"
            "%{customdata} failures<extra></extra>",
        )
    )
    return _layout(fig, title, yaxis_title="per 1000 node-days", yaxis_rangemode="tozero")


def fig_mtbf(frame: pl.DataFrame) -> go.Figure:
    title = "MTBF per node by component (hours)"
    if frame.height == 0:
        return _empty(title, "no failures in this range")
    fig = go.Figure(
        go.Bar(
            x=frame["component"].to_list(),
            y=frame["mtbf_node_h"].to_list(),
            customdata=frame["failures"].to_list(),
            marker_color=PALETTE[3],
            hovertemplate=_HOVER + "%{customdata} failures<extra></extra>",
        )
    )
    return _layout(fig, title, yaxis_title="hours")


def fig_top_xids(frame: pl.DataFrame) -> go.Figure:
    title = "Top Xids"
    if frame.height == 0:
        return _empty(title, "no Xid events in this range")
    labels = [xid_label(x, n) for x, n in zip(frame["xid"], frame["name"], strict=True)]
    fig = go.Figure(
        go.Bar(
            y=labels[::-1],
            x=frame["events"].to_list()[::-1],
            orientation="h",
            marker_color=PALETTE[2],
        )
    )
    return _layout(fig, title, left=XID_LABEL_PX, xaxis_title="events")


XID_LABEL_PX = 230  # room for XID_LABEL_CHARS at plotly's 12 px tick font


def fig_at_risk(frame: pl.DataFrame) -> go.Figure:
    title = "Nodes / GPUs at risk now"
    if frame.height == 0:
        return _empty(title, "no predictions: run `faultlens predict`")
    top = frame.head(15)
    labels = [
        f"{n} gpu{g}" if g not in (None, "") else n
        for n, g in zip(top["node"].to_list(), top["gpu"].to_list(), strict=True)
    ]
    fig = go.Figure(
        go.Bar(
            y=labels[::-1], x=top["score"].to_list()[::-1], orientation="h", marker_color=PALETTE[1]
        )
    )
    return _layout(fig, title, left=130, xaxis_title="failure probability", xaxis_range=[0, 1])


# -- events ----------------------------------------------------------------------------------------
def fig_event_timeline(frame: pl.DataFrame) -> go.Figure:
    """Events per time bucket stacked by the frame's second column (kind, source or severity)."""
    group = next((c for c in ("kind", "source", "severity") if c in frame.columns), "kind")
    return _stacked(frame, "bucket", group, "events", f"Events over time by {group}", "events")


def fig_node_events(frame: pl.DataFrame) -> go.Figure:
    """Warning-or-worse events of one node: time on x, kind on y, colored by severity."""
    title = "Events on this node"
    if frame.height == 0:
        return _empty(title)
    fig = go.Figure()
    for sev, color in SEVERITY_COLOR.items():
        part = frame.filter(pl.col("severity") == sev)
        if part.height:
            fig.add_scatter(
                x=_values(part["ts"]),
                y=part["kind"].to_list(),
                mode="markers",
                name=sev,
                marker={"color": color, "size": 9},
                text=part["message"].to_list(),
                hoverinfo="x+y+text",
            )
    return _layout(fig, title, left=150)


def fig_telemetry(frame: pl.DataFrame, metric: str = "") -> go.Figure:
    title = f"{metric or 'Telemetry'} per GPU"
    if frame.height == 0:
        return _empty(title, "no telemetry for this node and range")
    fig = go.Figure()
    gpus = sorted(frame["gpu"].unique().drop_nulls().to_list())
    # a few samples per GPU are drawn as points: a line needs two, and one sample alone would
    # otherwise leave an empty chart
    mode = "lines+markers" if frame.height <= FEW_SAMPLES * max(len(gpus), 1) else "lines"
    for i, gpu in enumerate(gpus):
        part = _break_gaps(frame.filter(pl.col("gpu") == gpu).sort("ts"))
        fig.add_scatter(
            x=_values(part["ts"]),
            y=_values(part["value"]),
            mode=mode,
            name=f"gpu {gpu}",
            line={"color": PALETTE[i % len(PALETTE)]},
        )
    lo, hi = frame["ts"].min(), frame["ts"].max()
    if lo is not None and hi is not None and (hi - lo) < MIN_TIME_SPAN:  # no sub-ms axis
        fig.update_xaxes(range=[lo - MIN_TIME_SPAN, hi + MIN_TIME_SPAN])
    return _layout(fig, title, yaxis_title=metric.removeprefix("DCGM_FI_DEV_").lower() or None)


def _break_gaps(part: pl.DataFrame, factor: float = 3.0) -> pl.DataFrame:
    """A null value after each point followed by a gap longer than ``factor`` typical steps, so
    the line stops where the telemetry stops instead of drawing a ramp across the hole."""
    if part.height < 3:
        return part
    step = part["ts"].diff()
    typical = step.median()
    if typical is None:
        return part
    gap_after = (step.shift(-1) > typical * factor).fill_null(False)
    if not gap_after.any():
        return part
    holes = part.filter(gap_after).select(
        (pl.col("ts") + typical).alias("ts"), pl.lit(None, pl.Float64).alias("value")
    )
    return pl.concat([part.select("ts", pl.col("value").cast(pl.Float64)), holes]).sort("ts")


# -- jobs ------------------------------------------------------------------------------------------
def fig_taxonomy(frame: pl.DataFrame) -> go.Figure:
    title = "Job interruptions by root cause"
    if frame.height == 0:
        return _empty(title, "no attributed interruptions in this range")
    fig = go.Figure(
        go.Bar(
            x=frame["cause"].to_list(),
            y=frame["interruptions"].to_list(),
            customdata=frame["share_pct"].to_list(),
            marker_color=PALETTE[0],
            name="interruptions",
            hovertemplate=_HOVER + "%{customdata}% of interruptions<extra></extra>",
        )
    )
    fig.add_scatter(
        x=frame["cause"].to_list(),
        y=frame["gpu_hours_lost"].to_list(),
        name="GPU-hours lost",
        yaxis="y2",
        mode="markers",
        marker={"color": PALETTE[2], "size": 12},
    )
    return _layout(
        fig,
        title,
        right=70,
        yaxis_title="interruptions",
        yaxis2={
            "title": "GPU-hours lost",
            "overlaying": "y",
            "side": "right",
            "rangemode": "tozero",
        },
    )


# -- predictions -----------------------------------------------------------------------------------
def fig_model_vs_baselines(frame: pl.DataFrame) -> go.Figure:
    title = "Model vs baselines (test window)"
    if frame.height == 0:
        return _empty(title, "no model card: run `faultlens train`")
    fig = go.Figure()
    for i, metric in enumerate(("pr_auc", "precision", "recall", "precision_at_k")):
        fig.add_bar(
            x=frame["scorer"].to_list(),
            y=frame[metric].to_list(),
            name=metric,
            marker_color=PALETTE[i],
        )
    return _layout(fig, title, barmode="group", yaxis_range=[0, 1])


def fig_calibration(frame: pl.DataFrame) -> go.Figure:
    title = "Calibration: predicted vs observed failure rate"
    if frame.height == 0:
        return _empty(title, "no predictions in this range")
    fig = go.Figure()
    fig.add_scatter(
        x=[0, 1], y=[0, 1], mode="lines", name="perfect", line={"dash": "dash", "color": "#999"}
    )
    fig.add_scatter(
        x=frame["predicted"].to_list(),
        y=frame["observed"].to_list(),
        mode="lines+markers",
        name="model",
        text=frame["rows"].to_list(),
        marker={"size": 9, "color": PALETTE[0]},
    )
    return _layout(
        fig,
        title,
        xaxis_title="predicted",
        yaxis_title="observed",
        xaxis_range=[0, 1],
        yaxis_range=[0, 1],
    )


# -- stragglers ------------------------------------------------------------------------------------
def fig_straggler_causes(frame: pl.DataFrame) -> go.Figure:
    title = "GPU-hours wasted by straggler cause"
    if frame.height == 0:
        return _empty(title, "no stragglers in this range")
    by = (
        frame.group_by("cause")
        .agg(pl.col("wasted_gpu_h").sum(), pl.len().alias("n"))
        .sort("wasted_gpu_h", descending=True)
    )
    fig = go.Figure(
        go.Bar(
            x=by["cause"].to_list(),
            y=by["wasted_gpu_h"].to_list(),
            customdata=by["n"].to_list(),
            marker_color=PALETTE[1],
            hovertemplate=_HOVER + "%{customdata} stragglers<extra></extra>",
        )
    )
    return _layout(fig, title, yaxis_title="GPU-hours")


def fig_straggler_slowdown(frame: pl.DataFrame) -> go.Figure:
    title = "Slowdown vs GPU-hours wasted"
    if frame.height == 0:
        return _empty(title, "no stragglers in this range")
    labels = [
        f"{j} {n} gpu{g}"
        for j, n, g in zip(
            frame["job_id"].to_list(), frame["node"].to_list(), frame["gpu"].to_list(), strict=True
        )
    ]
    fig = go.Figure(
        go.Scatter(
            x=frame["slowdown"].to_list(),
            y=frame["wasted_gpu_h"].to_list(),
            mode="markers",
            text=labels,
            marker={"size": 10, "color": PALETTE[4]},
        )
    )
    return _layout(fig, title, xaxis_title="slowdown (x)", yaxis_title="GPU-hours wasted")


# -- recovery --------------------------------------------------------------------------------------
def fig_strategy_ranking(frame: pl.DataFrame) -> go.Figure:
    """ETTR per strategy with its bootstrap 95% interval, best (fewest dollars lost) first."""
    title = "Recovery strategies: ETTR (95% CI)"
    if frame.height == 0:
        return _empty(title, "no interruptions to replay in this range")
    err_hi = [
        max(h - e, 0.0) if h == h else 0.0
        for e, h in zip(frame["ettr"].to_list(), frame["ettr_hi"].to_list(), strict=True)
    ]
    err_lo = [
        max(e - lo, 0.0) if lo == lo else 0.0
        for e, lo in zip(frame["ettr"].to_list(), frame["ettr_lo"].to_list(), strict=True)
    ]
    fig = go.Figure(
        go.Bar(
            x=frame["strategy"].to_list(),
            y=frame["ettr"].to_list(),
            marker_color=PALETTE[4],
            error_y={"type": "data", "array": err_hi, "arrayminus": err_lo},
            customdata=frame["cost_usd"].to_list(),
            hovertemplate=_HOVER + "$%{customdata:,.0f} lost<extra></extra>",
        )
    )
    lo = max(0.0, min(frame["ettr"].min() or 0.0, 1.0) - 0.05)
    return _layout(fig, title, yaxis_title="ETTR", yaxis_range=[lo, 1.0])


def fig_badput(frame: pl.DataFrame) -> go.Figure:
    """Where the lost GPU-hours went, per strategy (stacked badput buckets)."""
    title = "Badput by bucket (GPU-hours)"
    cols = [c for c in frame.columns if c.startswith("badput_")]
    if frame.height == 0 or not cols:
        return _empty(title, "no interruptions to replay in this range")
    fig = go.Figure()
    for i, c in enumerate([*cols, "spare_idle"] if "spare_idle" in frame.columns else cols):
        fig.add_bar(
            x=frame["strategy"].to_list(),
            y=frame[c].to_list(),
            name=c.removeprefix("badput_"),
            marker_color=PALETTE[i % len(PALETTE)],
        )
    return _layout(fig, title, barmode="stack", yaxis_title="GPU-hours")


# -- data health -----------------------------------------------------------------------------------
def fig_ingest(frame: pl.DataFrame) -> go.Figure:
    title = "Lines by format: parsed / noise / quarantined"
    if frame.height == 0:
        return _empty(title, "nothing ingested yet: run `faultlens ingest`")
    # formats down the side: a site has dozens, and rotated names ran out of the frame
    fig = go.Figure()
    names = [_cut(n, 24) for n in frame["format"].to_list()][::-1]
    for i, c in enumerate(("parsed", "noise", "quarantined")):
        fig.add_bar(
            y=names,
            x=frame[c].to_list()[::-1],
            name=c,
            orientation="h",
            marker_color=(PALETTE[4], "#bab0ac", PALETTE[2])[i],
        )
    fig = _layout(fig, title, left=180, barmode="stack", xaxis_title="lines")
    fig.update_layout(height=max(HEIGHT, 150 + 18 * frame.height))
    return fig


def fig_quarantine_reasons(frame: pl.DataFrame) -> go.Figure:
    title = "Quarantined lines by reason"
    if frame.height == 0:
        return _empty(title, "nothing quarantined")
    top = frame.head(12)
    fig = go.Figure(
        go.Bar(
            y=[_cut(r, 40) for r in top["reason"].to_list()][::-1],
            x=top["lines"].to_list()[::-1],
            orientation="h",
            marker_color=PALETTE[2],
        )
    )
    return _layout(fig, title, left=290, xaxis_title="lines")

"""The predictions and stragglers pages' charts as Vega-Lite specs (``st.vega_lite_chart``).

The first page to draw a plotly chart paid 1.2-2 s for the browser to load plotly.js (after the
jobs page, the predictions page: 1.8 s); Vega is loaded by the overview already, so with these
the dashboard never loads plotly.js. The look follows the ``reports.figures`` /
``reports.straggler_forecast`` function each replaces (which the HTML report keeps): the same
titles, colours, axis titles, order, reference line and hover fields. Each function takes that
figure's frame and returns ``(data, spec)``; an empty frame gives a chart that says what the
figure says. The shared pieces are in ``vega``.
"""

from __future__ import annotations

import polars as pl

from faultlens.app.dashboard.vega import Chart, _spec, colors, empty, in_order
from faultlens.reports.chart_style import PALETTE
from faultlens.reports.straggler_forecast import TOP_N

AT_RISK_N = 15  # bars of the at-risk chart, as ``figures.fig_at_risk``
AT_RISK_LABEL_PX = 120  # "node gpuN" whole (the plotly figure's 130 px margin)
MODEL_METRICS = ("pr_auc", "precision", "recall", "precision_at_k")
PERFECT_COLOR, PERFECT_DASH = "#999", [5, 4]  # the calibration's diagonal
_PROBABILITY = {"domain": [0, 1], "nice": False}
_POINT_PAD_PX = 8  # a point at the end of the data whole, off the axis line


def _gpu_labels(frame: pl.DataFrame, *, job: bool) -> pl.Series:
    """``[job ]node gpuN`` per row, ``[job ]node`` for a whole node (no GPU)."""
    node = pl.concat_str(pl.col("job_id"), pl.col("node"), separator=" ") if job else "node"
    gpu = pl.col("gpu").cast(pl.String)
    return frame.select(
        pl.when(gpu.is_null() | (gpu == ""))
        .then(node)
        .otherwise(pl.format("{} gpu{}", node, gpu))
        .alias("label")
    ).to_series()


# -- predictions -----------------------------------------------------------------------------------
def at_risk(frame: pl.DataFrame) -> Chart:
    """The latest run's riskiest nodes and GPUs (``q_fleet.latest_predictions``), in its order
    (highest first) from the top down (the rows' ``rank``, as ``vega``'s bars)."""
    title = "Nodes / GPUs at risk now"
    if frame.height == 0:
        return empty(title, "no predictions: run `faultlens predict`")
    top = frame.head(AT_RISK_N)
    data = top.select(_gpu_labels(top, job=False), "score").with_row_index("rank")
    return data, _spec(
        title,
        mark={"type": "bar", "color": PALETTE[1]},
        encoding={
            "y": in_order("label", labelLimit=AT_RISK_LABEL_PX),
            "x": {
                "field": "score",
                "type": "quantitative",
                "title": "failure probability",
                "scale": _PROBABILITY,
            },
            "tooltip": [
                {"field": "label", "title": "node / GPU"},
                {"field": "score", "type": "quantitative", "format": ".2f", "title": "p"},
            ],
        },
    )


def calibration(frame: pl.DataFrame) -> Chart:
    """Observed failure rate against the mean predicted score per score bin
    (``q_detail.calibration``), over the dashed diagonal of a perfectly calibrated model."""
    title = "Calibration: predicted vs observed failure rate"
    if frame.height == 0:
        return empty(title, "no predictions in this range")
    # both layers encode ``series``: one legend, a dashed grey and a solid blue line
    names = ["perfect", "model"]
    legend = {"orient": "right", "title": None, "symbolType": "stroke", "symbolStrokeWidth": 2}
    encoding = {
        "x": {
            "field": "predicted",
            "type": "quantitative",
            "title": "predicted",
            "scale": _PROBABILITY,
        },
        "y": {
            "field": "observed",
            "type": "quantitative",
            "title": "observed",
            "scale": _PROBABILITY,
        },
        "color": {
            "field": "series",
            "type": "nominal",
            "scale": {"domain": names, "range": [PERFECT_COLOR, PALETTE[0]]},
            "legend": legend,
        },
        "strokeDash": {
            "field": "series",
            "type": "nominal",
            "scale": {"domain": names, "range": [PERFECT_DASH, [1, 0]]},
            "legend": legend,
        },
    }
    diagonal = [{"predicted": p, "observed": p, "series": "perfect"} for p in (0, 1)]
    data = frame.select("predicted", "observed", "rows", series=pl.lit("model"))
    return data, _spec(
        title,
        layer=[
            {
                "data": {"values": diagonal},
                "mark": {"type": "line", "strokeWidth": 2},
                "encoding": encoding,
            },
            {
                "mark": {"type": "line", "strokeWidth": 2, "point": {"size": 80, "filled": True}},
                "encoding": {
                    **encoding,
                    "tooltip": [
                        {"field": "predicted", "type": "quantitative", "format": ".2f"},
                        {"field": "observed", "type": "quantitative", "format": ".2f"},
                        {"field": "rows", "type": "quantitative", "format": ","},
                    ],
                },
            },
        ],
    )


def model_vs_baselines(frame: pl.DataFrame) -> Chart:
    """A model card's test-window metrics (``q_detail.baseline_metrics``): per scorer, in the
    card's order, a group of bars, one per metric."""
    title = "Model vs baselines (test window)"
    if frame.height == 0:
        return empty(title, "no model card: run `faultlens train`")
    scorers = frame["scorer"].to_list()
    metrics = list(MODEL_METRICS)
    data = frame.select("scorer", *metrics).unpivot(
        index="scorer", on=metrics, variable_name="metric", value_name="value"
    )
    return data, _spec(
        title,
        mark={"type": "bar"},
        encoding={
            "x": {
                "field": "scorer",
                "type": "nominal",
                "sort": scorers,
                "title": None,
                "axis": {"labelAngle": 0},
            },
            "xOffset": {"field": "metric", "type": "nominal", "sort": metrics},
            "y": {"field": "value", "type": "quantitative", "title": None, "scale": _PROBABILITY},
            "color": colors("metric", metrics, list(PALETTE[: len(metrics)])),
            "tooltip": [
                {"field": "scorer"},
                {"field": "metric"},
                {"field": "value", "type": "quantitative", "format": ".3f"},
            ],
        },
    )


# -- stragglers ------------------------------------------------------------------------------------
def straggler_causes(frame: pl.DataFrame) -> Chart:
    """GPU-hours wasted per straggler cause (``q_detail.select_stragglers``), most first; the
    number of stragglers in the hover."""
    title = "GPU-hours wasted by straggler cause"
    if frame.height == 0:
        return empty(title, "no stragglers in this range")
    data = (
        frame.group_by("cause")
        .agg(pl.col("wasted_gpu_h").sum(), pl.len().alias("stragglers"))
        .sort("wasted_gpu_h", "cause", descending=[True, False])
        .with_columns(pl.col("cause").cast(pl.String).fill_null("None"))
        .with_row_index("rank")
    )
    return data, _spec(
        title,
        mark={"type": "bar", "color": PALETTE[1]},
        encoding={
            "x": in_order("cause", labelAngle=0),
            "y": {"field": "wasted_gpu_h", "type": "quantitative", "title": "GPU-hours"},
            "tooltip": [
                {"field": "cause"},
                {
                    "field": "wasted_gpu_h",
                    "type": "quantitative",
                    "format": ",.1f",
                    "title": "GPU-h",
                },
                {"field": "stragglers", "type": "quantitative"},
            ],
        },
    )


def straggler_slowdown(frame: pl.DataFrame) -> Chart:
    """Each straggler's slowdown against the GPU-hours it wasted; the job, node and GPU in the
    hover."""
    title = "Slowdown vs GPU-hours wasted"
    if frame.height == 0:
        return empty(title, "no stragglers in this range")
    data = frame.select(_gpu_labels(frame, job=True), "slowdown", "wasted_gpu_h")
    return data, _spec(
        title,
        mark={"type": "point", "filled": True, "size": 100, "opacity": 1, "color": PALETTE[4]},
        encoding={
            "x": {
                "field": "slowdown",
                "type": "quantitative",
                "title": "slowdown (x)",
                "scale": {"zero": False, "padding": _POINT_PAD_PX},
            },
            "y": {
                "field": "wasted_gpu_h",
                "type": "quantitative",
                "title": "GPU-hours wasted",
                "scale": {"padding": _POINT_PAD_PX},
            },
            "tooltip": [
                {"field": "label", "title": "straggler"},
                {"field": "slowdown", "type": "quantitative", "format": ".2f"},
                {
                    "field": "wasted_gpu_h",
                    "type": "quantitative",
                    "format": ",.1f",
                    "title": "GPU-h",
                },
            ],
        },
    )


def straggler_forecast(frame: pl.DataFrame) -> Chart:
    """The GPUs most likely to straggle in their next window (``StragglerForecast.next``),
    highest probability first."""
    title = "Likely to straggle in the next window"
    if frame.height == 0:
        return empty(title, "no GPU above the threshold")
    top = frame.sort("score", descending=True, maintain_order=True).head(TOP_N)
    data = top.select(_gpu_labels(top, job=True), "score").with_row_index("rank")
    return data, _spec(
        title,
        mark={"type": "bar", "color": PALETTE[2]},
        encoding={
            "x": in_order("label", labelAngle=-30, labelLimit=140),
            "y": {
                "field": "score",
                "type": "quantitative",
                "title": "probability",
                "scale": _PROBABILITY,
            },
            "tooltip": [
                {"field": "label", "title": "GPU"},
                {"field": "score", "type": "quantitative", "format": ".2f", "title": "p"},
            ],
        },
    )

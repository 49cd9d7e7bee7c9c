"""The jobs, recovery and data-health pages' charts as Vega-Lite specs (``st.vega_lite_chart``).

The first page to draw a plotly chart paid 1.2-2 s for the browser to load plotly.js (the jobs
page's first render 2.7-3.2 s, 0.62 s without its chart); Vega is loaded by the overview already,
so with these the dashboard never loads plotly.js. The look follows the ``reports.figures``
function each replaces (which the HTML report keeps): the same titles, colours, axis titles,
order and hover fields. Each function takes that figure's frame and returns ``(data, spec)``; an
empty frame gives a chart that says what the figure says. The shared pieces are in ``vega``.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from faultlens.app.dashboard.vega import HEIGHT, Chart, _js, _spec, colors, empty, in_order
from faultlens.reports.chart_style import PALETTE, _cut

TAXONOMY_MARKS = {"interruptions": (PALETTE[0], "square"), "GPU-hours lost": (PALETTE[2], "circle")}
TAXONOMY_TOOLTIP = [  # either mark's hover: the cause's whole row
    {"field": "cause"},
    {"field": "interruptions", "type": "quantitative"},
    {"field": "share_pct", "type": "quantitative", "format": ".1f", "title": "% of interruptions"},
    {
        "field": "gpu_hours_lost",
        "type": "quantitative",
        "format": ",.1f",
        "title": "GPU-hours lost",
    },
]
ERROR_BAR_COLOR = "#2a3f5f"  # plotly_white's error bars
ERROR_CAP_PX = 12
INGEST_PARTS = {"parsed": PALETTE[4], "noise": "#bab0ac", "quarantined": PALETTE[2]}
INGEST_ROW_PX = 18  # a format's bar: a site has dozens, and the chart grows with them
INGEST_LABEL_CHARS = 24
TOP_REASONS = 12
REASON_LABEL_CHARS = 40


# -- jobs ------------------------------------------------------------------------------------------
def taxonomy(frame: pl.DataFrame) -> Chart:
    """Interruptions per cause as bars (left axis) and the GPU-hours they lost as points on a
    second axis on the right, in the query's order (most interruptions first)."""
    title = "Job interruptions by root cause"
    if frame.height == 0:
        return empty(title, "no attributed interruptions in this range")
    names = list(TAXONOMY_MARKS)
    # one legend below the plot for both marks, each entry with its mark's colour and symbol
    shapes = " : ".join(
        f"datum.value === {_js(n)} ? {_js(s)}" for n, (_, s) in TAXONOMY_MARKS.items()
    )
    color = {
        "scale": {"domain": names, "range": [c for c, _ in TAXONOMY_MARKS.values()]},
        "legend": {
            "orient": "bottom",
            "title": None,
            "encode": {"symbols": {"update": {"shape": {"signal": f"{shapes} : 'circle'"}}}},
        },
    }

    def layer(mark: dict[str, Any], field: str, name: str, axis: dict[str, Any]) -> dict[str, Any]:
        return {
            "mark": mark,
            "encoding": {
                "y": {
                    "field": field,
                    "type": "quantitative",
                    "title": name,
                    "scale": {"zero": True},
                    "axis": axis,
                },
                "color": {**color, "datum": name},
            },
        }

    data = frame.select("cause", "interruptions", "share_pct", "gpu_hours_lost").with_row_index(
        "rank"
    )
    return data, _spec(
        title,
        encoding={
            "x": in_order("cause", labelAngle=0),
            "tooltip": TAXONOMY_TOOLTIP,
        },
        layer=[
            layer(
                {"type": "bar"},
                "interruptions",
                names[0],
                {"orient": "left", "tickMinStep": 1},
            ),
            layer(
                {"type": "point", "filled": True, "size": 140, "opacity": 1},
                "gpu_hours_lost",
                names[1],
                {"orient": "right", "grid": False},
            ),
        ],
        resolve={"scale": {"y": "independent"}},
    )


# -- recovery --------------------------------------------------------------------------------------
def _strategy_x() -> dict[str, Any]:
    """The strategies in the frame's order (best first, its ``rank``), names slanted: seven of
    them fit."""
    return in_order("strategy", labelAngle=-45)


def strategy_ranking(frame: pl.DataFrame) -> Chart:
    """ETTR per strategy with its bootstrap 95% interval (an end on the wrong side of the ETTR
    drawn at it, an unknown one not drawn), best (fewest dollars lost) first; the axis starts
    just under the lowest ETTR, where the strategies differ."""
    title = "Recovery strategies: ETTR (95% CI)"
    if frame.height == 0:
        return empty(title, "no interruptions to replay in this range")
    ettr = pl.col("ettr").cast(pl.Float64)

    def end(column: str, pick: Any) -> pl.Expr:
        value = pl.col(column).cast(pl.Float64).fill_nan(None)
        return pl.when(value.is_null()).then(None).otherwise(pick(value, ettr)).alias(column)

    data = frame.with_row_index("rank").select(
        "rank",
        "strategy",
        ettr,
        end("ettr_lo", pl.min_horizontal),
        end("ettr_hi", pl.max_horizontal),
        pl.col("cost_usd").cast(pl.Float64),
    )
    lowest = data["ettr"].min()
    lo = max(0.0, min(float(lowest) if lowest is not None else 0.0, 1.0) - 0.05)
    y = {
        "type": "quantitative",
        "title": "ETTR",
        # the bars start at the axis (their zero is clamped to it)
        "scale": {"domain": [lo, 1.0], "nice": False, "zero": False, "clamp": True},
    }
    return data, _spec(
        title,
        encoding={
            "x": _strategy_x(),
            "tooltip": [
                {"field": "strategy"},
                {"field": "ettr", "type": "quantitative", "format": ".4f", "title": "ETTR"},
                {"field": "ettr_lo", "type": "quantitative", "format": ".4f", "title": "95% from"},
                {"field": "ettr_hi", "type": "quantitative", "format": ".4f", "title": "95% to"},
                {"field": "cost_usd", "type": "quantitative", "format": "$,.0f", "title": "lost"},
            ],
        },
        layer=[
            {
                "mark": {"type": "bar", "color": PALETTE[4]},
                "encoding": {"y": {**y, "field": "ettr"}},
            },
            {
                "mark": {
                    "type": "errorbar",
                    "ticks": {"size": ERROR_CAP_PX},
                    "color": ERROR_BAR_COLOR,
                },
                "encoding": {"y": {**y, "field": "ettr_lo"}, "y2": {"field": "ettr_hi"}},
            },
        ],
    )


def badput(frame: pl.DataFrame) -> Chart:
    """Where the lost GPU-hours went, per strategy: the badput buckets stacked in the frame's
    column order from the bottom (spare nodes' idle hours on top), the legend top first."""
    title = "Badput by bucket (GPU-hours)"
    cols = [c for c in frame.columns if c.startswith("badput_")]
    if frame.height == 0 or not cols:
        return empty(title, "no interruptions to replay in this range")
    cols += ["spare_idle"] if "spare_idle" in frame.columns else []
    names = [c.removeprefix("badput_") for c in cols]
    data = pl.concat(
        frame.with_row_index("rank").select(
            "rank",
            "strategy",
            pl.lit(name).alias("group"),
            pl.lit(i, pl.Int32).alias("order"),
            pl.col(c).cast(pl.Float64).alias("gpu_hours"),
        )
        for i, (c, name) in enumerate(zip(cols, names, strict=True))
    )
    palette = [PALETTE[i % len(PALETTE)] for i in range(len(names))]
    return data, _spec(
        title,
        mark={"type": "bar"},
        encoding={
            "x": _strategy_x(),
            "y": {"field": "gpu_hours", "type": "quantitative", "title": "GPU-hours"},
            "color": colors("group", names[::-1], palette[::-1]),
            "order": {"field": "order", "type": "quantitative", "sort": "ascending"},
            "tooltip": [
                {"field": "strategy"},
                {"field": "group", "title": "bucket"},
                {"field": "gpu_hours", "type": "quantitative", "format": ",.1f", "title": "GPU-h"},
            ],
        },
    )


# -- data health -----------------------------------------------------------------------------------
def ingest(frame: pl.DataFrame) -> Chart:
    """Lines per format, parsed / noise / quarantined stacked left to right, the formats down
    the side in the query's order (a site has dozens: rotated names ran out of the frame)."""
    title = "Lines by format: parsed / noise / quarantined"
    if frame.height == 0:
        return empty(title, "nothing ingested yet: run `faultlens ingest`")
    names = list(INGEST_PARTS)
    labels = [_cut(n, INGEST_LABEL_CHARS) for n in frame["format"].to_list()]
    rows = frame.with_columns(pl.Series("label", labels, pl.String)).with_row_index("rank")
    data = pl.concat(
        rows.select(
            "rank",
            "label",
            "format",
            pl.lit(part).alias("group"),
            pl.lit(i, pl.Int32).alias("order"),
            pl.col(part).cast(pl.Int64).alias("lines"),
        )
        for i, part in enumerate(names)
    )
    return data, _spec(
        title,
        height=max(HEIGHT - 110, INGEST_ROW_PX * frame.height),
        mark={"type": "bar"},
        encoding={
            "y": in_order("label"),
            "x": {"field": "lines", "type": "quantitative", "title": "lines"},
            # the legend as the report's: the stack's last part first
            "color": colors("group", names[::-1], list(INGEST_PARTS.values())[::-1]),
            "order": {"field": "order", "type": "quantitative", "sort": "ascending"},
            "tooltip": [
                {"field": "format"},
                {"field": "group", "title": "kind"},
                {"field": "lines", "type": "quantitative", "format": ","},
            ],
        },
    )


def quarantine_reasons(frame: pl.DataFrame) -> Chart:
    """The most common quarantine reasons (the first ``TOP_REASONS``, most lines on top)."""
    title = "Quarantined lines by reason"
    if frame.height == 0:
        return empty(title, "nothing quarantined")
    top = frame.head(TOP_REASONS)
    labels = [_cut(r, REASON_LABEL_CHARS) for r in top["reason"].to_list()]
    # the files a reason was seen in: in the hover when the frame has them
    counts = [c for c in ("lines", "files") if c in top.columns]
    data = (
        top.select("reason", *counts)
        .with_columns(pl.Series("label", labels, pl.String))
        .with_row_index("rank")
    )
    return data, _spec(
        title,
        mark={"type": "bar", "color": PALETTE[2]},
        encoding={
            "y": in_order("label", labelLimit=0),  # cut to REASON_LABEL_CHARS already
            "x": {
                "field": "lines",
                "type": "quantitative",
                "title": "lines",
                "axis": {"tickMinStep": 1},
            },
            "tooltip": [
                {"field": "reason"},
                *({"field": c, "type": "quantitative", "format": ","} for c in counts),
            ],
        },
    )

"""The overview's, the events page's and the node page's charts as Vega-Lite specs
(``st.vega_lite_chart``), not plotly figures.

The overview is the page every visit starts on, and plotly.js was the largest part of its cold
first load in the browser (1.4 s of script time of 2.5 s, the fleet grid and three bar charts;
`bench/bench_first_load.py`). Vega-Lite draws the same charts for a fraction of that, and plotly
is then not imported to draw the first page at all. The events page's timeline too: the first
page to load plotly.js paid about a second for it (its first render over the 2 s target). The
node page's two charts follow (the page a click on the grid or an incident opens; its filter
changes took as long either way). Then the jobs page was the first with a plotly chart and paid
1.2-2 s for plotly.js on its first render after a write, so every other page's charts followed
(``vega_ops``, ``vega_models``, ``vega_reliability``, which build on the pieces here): the
dashboard never loads plotly.js. The look follows ``reports.figures`` (which the HTML report
keeps): the same colours, titles, sizes and labels (``reports.chart_style``). Each function
returns ``(data, spec)``; an empty frame gives a chart that says there is nothing to show.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import polars as pl

from faultlens.reports.chart_style import (
    FEW_SAMPLES,
    GRID_LABEL_PX,
    GRID_PX,
    MIN_TIME_SPAN,
    PALETTE,
    SEVERITY_COLOR,
    STATE_COLOR,
    _group_ticks,
    gap_segments,
    grid_columns,
    grid_positions,
    xid_label,
)

HEIGHT = 340
PICK = "pick"  # the fleet grid's click selection (its node), read by the overview
# SVG, not canvas, at any size: marks stay elements (their hover, a test's click) and the
# grid's 2,048 squares draw as fast
_SVG = {"embedOptions": {"renderer": "svg", "actions": False}}
_CONFIG = {
    "view": {"stroke": None},
    "axis": {"labelFontSize": 12, "titleFontSize": 12, "gridColor": "#eee"},
    "title": {"fontSize": 16, "anchor": "start", "fontWeight": "normal"},
}

_PADDING = {"left": 5, "top": 5, "right": 5, "bottom": 5}  # an object: Streamlit sets its bottom

Chart = tuple[pl.DataFrame | None, dict[str, Any]]
# The stamps are naive UTC (every page says "UTC"); the browser reads a naive time as its own
# local time, so axes, hovers and domains stay in local time: they then show the UTC wall clock
# whatever the browser's time zone (a "utc" scale would shift them by its offset).
_TIME = {"type": "temporal"}


def _spec(title: str, **kw: Any) -> dict[str, Any]:
    return {
        "title": title,
        "height": HEIGHT - 110,
        "width": "container",
        "padding": _PADDING,
        "config": _CONFIG,
        "usermeta": _SVG,
        **kw,
    }


def empty(title: str, what: str = "no data in this range") -> Chart:
    return None, _spec(
        title,
        data={"values": [{"text": what}]},
        mark={"type": "text", "fontSize": 14, "color": "#777"},
        encoding={"text": {"field": "text"}},
    )


def failure_trend(frame: pl.DataFrame) -> Chart:
    """Failures per 1000 node-days per period, the failure count in the hover."""
    title = "Failures per 1000 node-days"
    if frame.height == 0:
        return empty(title)
    return frame.select("period", "per_1000_node_days", "failures"), _spec(
        title,
        mark={"type": "bar", "color": PALETTE[0]},
        encoding={
            "x": _time_x("period"),
            "y": {
                "field": "per_1000_node_days",
                "type": "quantitative",
                "title": "per 1000 node-days",
                "axis": {"format": "~g"},
            },
            "tooltip": [
                {**_TIME, "field": "period", "title": "period"},
                {"field": "per_1000_node_days", "type": "quantitative", "format": ".2f"},
                {"field": "failures", "type": "quantitative"},
            ],
        },
    )


def event_timeline(frame: pl.DataFrame) -> Chart:
    """Events per time bucket stacked by the frame's group column (kind, source or severity),
    the largest group at the bottom and first in the legend, as ``figures.fig_event_timeline``."""
    group = next((c for c in ("kind", "source", "severity") if c in frame.columns), "kind")
    title = f"Events over time by {group}"
    if frame.height == 0:
        return empty(title)
    totals = frame.group_by(group).agg(pl.col("events").sum()).sort("events", descending=True)
    order = [str(g) for g in totals[group].to_list()]
    rank = {g: i for i, g in enumerate(order)}
    data = frame.select(
        "bucket",
        pl.col(group).cast(pl.String).fill_null("None").alias("group"),
        "events",
    ).with_columns(pl.col("group").replace_strict(rank, default=len(rank)).alias("order"))
    return data, _spec(
        title,
        mark={"type": "bar"},
        encoding={
            "x": _time_x("bucket"),
            "y": {"field": "events", "type": "quantitative", "title": "events", "stack": True},
            "color": colors("group", order, [PALETTE[i % len(PALETTE)] for i in range(len(order))]),
            "order": {"field": "order", "type": "quantitative", "sort": "ascending"},
            "tooltip": [
                {**_TIME, "field": "bucket", "format": "%Y-%m-%d %H:%M", "title": "from"},
                {"field": "group", "title": group},
                {"field": "events", "type": "quantitative", "format": ","},
            ],
        },
    )


def mtbf(frame: pl.DataFrame) -> Chart:
    title = "MTBF per node by component (hours)"
    if frame.height == 0:
        return empty(title, "no failures in this range")
    data = frame.select("component", "mtbf_node_h", "failures").with_row_index("rank")
    return data, _spec(
        title,
        mark={"type": "bar", "color": PALETTE[3]},
        encoding={
            "x": in_order("component"),
            "y": {"field": "mtbf_node_h", "type": "quantitative", "title": "hours"},
            "tooltip": [
                {"field": "component", "type": "nominal"},
                {"field": "mtbf_node_h", "type": "quantitative", "format": ",.0f", "title": "h"},
                {"field": "failures", "type": "quantitative"},
            ],
        },
    )


def top_xids(frame: pl.DataFrame) -> Chart:
    title = "Top Xids"
    if frame.height == 0:
        return empty(title, "no Xid events in this range")
    labels = [xid_label(x, n) for x, n in zip(frame["xid"], frame["name"], strict=True)]
    data = frame.select("events").with_columns(pl.Series("xid", labels)).with_row_index("rank")
    return data, _spec(
        title,
        mark={"type": "bar", "color": PALETTE[2]},
        encoding={
            # the query's order (most events first), labels whole (chart_style cuts them)
            "y": in_order("xid", labelLimit=0),
            "x": {
                "field": "events",
                "type": "quantitative",
                "title": "events",
                "axis": {"tickMinStep": 1, "format": "~s"},
            },
            "tooltip": [{"field": "xid"}, {"field": "events", "type": "quantitative"}],
        },
    )


NODE_EVENT_SEVERITIES = ("warning", "error", "critical")
NODE_EVENT_COLUMNS: dict[str, Any] = {
    "ts": pl.Datetime("us"),
    "kind": pl.String,
    "severity": pl.String,
    "gpu": pl.String,
    "code": pl.Int64,
    "message": pl.String,
}
TELEMETRY_COLUMNS: dict[str, Any] = {"ts": pl.Datetime("us"), "gpu": pl.Int32, "value": pl.Float64}


def _or_empty(frame: pl.DataFrame, schema: dict[str, Any]) -> pl.DataFrame:
    """``frame``, or an empty frame of ``schema`` when it has no rows (any columns)."""
    return frame if frame.height else pl.DataFrame(schema=schema)


# The node charts' colours are the same on every node (all severities in the legend, GPUs in
# their number's order).


def node_events(
    frame: pl.DataFrame, since: datetime | None = None, until: datetime | None = None
) -> Chart:
    """Warning-or-worse events of one node (``q_detail.node_event_points``): time on x over the
    range (``since`` .. ``until``), kind on y, coloured by severity; the message in the hover."""
    title = "Events on this node"
    # none in the range: the same chart without points (not a text chart), so that going from a
    # node to another swaps the data of one chart instead of building a new one in the browser
    frame = _or_empty(frame, NODE_EVENT_COLUMNS)
    x = _time_x("ts")
    if since is not None and until is not None:
        x["scale"] = {"domain": [_vl_time(since), _vl_time(until)]}
    return frame.select(*NODE_EVENT_COLUMNS), _spec(
        title,
        mark={"type": "point", "filled": True, "size": 70, "opacity": 0.85},
        encoding={
            "x": x,
            "y": {"field": "kind", "type": "nominal", "title": None, "axis": {"labelLimit": 140}},
            "color": {
                "field": "severity",
                "type": "nominal",
                "scale": {
                    "domain": list(NODE_EVENT_SEVERITIES),
                    "range": [SEVERITY_COLOR[s] for s in NODE_EVENT_SEVERITIES],
                },
                "legend": {"orient": "right", "title": None},
            },
            "tooltip": [
                {**_TIME, "field": "ts", "format": "%Y-%m-%d %H:%M:%S", "title": "time"},
                {"field": "kind"},
                {"field": "severity"},
                {"field": "gpu"},
                {"field": "code"},
                {"field": "message"},
            ],
        },
    )


def telemetry(frame: pl.DataFrame, metric: str = "") -> Chart:
    """One metric of one node per GPU (``q_detail.node_telemetry``), a line per GPU that stops
    at holes in the samples; few samples are drawn as points too; a span under an hour gets an
    hour either side (no sub-millisecond axis)."""
    title = f"{metric or 'Telemetry'} per GPU"
    # no samples: the same chart without lines (see ``node_events``); the page says why
    frame = _or_empty(frame, TELEMETRY_COLUMNS)
    rows = frame.filter(pl.col("ts").is_not_null()).sort("gpu", "ts")
    gpus = rows["gpu"].unique().drop_nulls().to_list()
    rows = rows.with_columns(
        gap_segments(rows),
        pl.format("gpu {}", pl.col("gpu")).alias("series"),
        pl.col("value").cast(pl.Float64),
    ).select("ts", "gpu", "series", "segment", "value")
    lo, hi = rows["ts"].min(), rows["ts"].max()
    x = _time_x("ts")
    if lo is not None and hi is not None and (hi - lo) < MIN_TIME_SPAN:
        x["scale"] = {"domain": [_vl_time(lo - MIN_TIME_SPAN), _vl_time(hi + MIN_TIME_SPAN)]}
    return rows, _spec(
        title,
        mark={"type": "line", "point": 0 < rows.height <= FEW_SAMPLES * max(len(gpus), 1)},
        encoding={
            "x": x,
            "y": {
                "field": "value",
                "type": "quantitative",
                "title": metric.removeprefix("DCGM_FI_DEV_").lower() or None,
                "scale": {"zero": False},
            },
            "color": {
                "field": "series",
                "type": "nominal",
                "sort": {"field": "gpu", "op": "min"},  # gpu 2 before gpu 10
                "scale": {"range": list(PALETTE)},
                "legend": {"orient": "right", "title": None},
            },
            "detail": {"field": "segment", "type": "nominal"},
            "tooltip": [
                {**_TIME, "field": "ts", "format": "%Y-%m-%d %H:%M", "title": "time"},
                {"field": "series", "title": "GPU"},
                {"field": "value", "type": "quantitative", "format": ",.2f"},
            ],
        },
    )


def in_order(field: str, **axis: Any) -> dict[str, Any]:
    """A category axis on ``field`` in the rows' order, read from their ``rank`` column (the
    data's ``with_row_index("rank")``), untitled, with ``axis`` options. Not ``"sort": None``:
    that keeps the order the values were first seen in, which in the browser outlives a data
    change (Streamlit swaps a chart's data in place when only the data changed, so a filter
    change left the first order)."""
    spec: dict[str, Any] = {
        "field": field,
        "type": "nominal",
        "sort": {"field": "rank", "op": "min"},
        "title": None,
    }
    return spec | ({"axis": axis} if axis else {})


def colors(field: str, names: list[str], palette: list[str]) -> dict[str, Any]:
    """A nominal colour encoding of ``field``: ``names`` in ``palette``'s colours, the legend
    right of the plot in the order of ``names``."""
    return {
        "field": field,
        "type": "nominal",
        "sort": names,
        "scale": {"domain": names, "range": palette},
        "legend": {"orient": "right", "title": None},
    }


def _time_x(field: str) -> dict[str, Any]:
    """A time axis on ``field``: no title, end labels inside, overlapping ones left out."""
    return {
        "field": field,
        "type": "temporal",
        "title": None,
        "axis": {"labelFlush": True, "labelOverlap": True},
    }


def _vl_time(ts: datetime) -> dict[str, Any]:
    """A naive UTC timestamp as a Vega-Lite DateTime in the browser's local time, as the data
    are read (a scale domain; a number there is not taken for a time)."""
    return {
        "year": ts.year,
        "month": ts.month,
        "date": ts.day,
        "hours": ts.hour,
        "minutes": ts.minute,
        "seconds": ts.second,
        "milliseconds": ts.microsecond // 1000,
    }


def fleet_grid(frame: pl.DataFrame) -> Chart:
    """Every node a square coloured by state, grouped by partition or rack (the group's name
    left of its first row); hover: the node, its group, state, reason and GPUs' issues; a click
    selects the node (``PICK``). The legend counts the states present."""
    title = "Fleet state"
    if frame.height == 0:
        return empty(title, "no nodes in the database")
    columns = grid_columns(frame.height)
    pitch = GRID_PX / columns
    cells = grid_positions(frame, columns)
    n_rows = max(int(cells["row"].max() or 0) + 1, 2)
    counts = dict(cells.group_by("state").len().iter_rows())
    present = [s for s in STATE_COLOR if counts.get(s)]
    legend = {s: f"{s} ({counts[s]:,})" for s in present}
    # the texts repeat across nodes (most are healthy, with the same reason): sent as Arrow
    # dictionaries, the grid's payload is a fraction of the plain strings' (300 KB at 2,048)
    data = cells.select(
        "node",
        pl.col("group").cast(pl.Categorical),
        pl.col("state").cast(pl.Categorical),
        "col",
        "row",
        pl.col("state").replace_strict(legend, default=None).cast(pl.Categorical).alias("legend"),
        pl.col("reason").fill_null("").cast(pl.Categorical),
        pl.col("gpus")
        .fill_null("")
        .str.replace_all("<br>", "; ", literal=True)
        .cast(pl.Categorical),
    )
    vals, text = _group_ticks(cells, pitch)
    labels = " : ".join(f"datum.value === {v} ? {_js(t)}" for v, t in zip(vals, text, strict=True))
    size = max(pitch - 3, 4)
    return data, {
        "width": GRID_PX,
        "height": int(pitch * n_rows),
        "padding": _PADDING,
        "autosize": {"type": "pad"},  # width / height are the grid's; labels and legend outside
        "config": {**_CONFIG, "axis": {**_CONFIG["axis"], "grid": False}},
        "usermeta": _SVG,
        "params": [{"name": PICK, "select": {"type": "point", "fields": ["node"], "on": "click"}}],
        "mark": {"type": "square", "size": size * size, "opacity": 1, "cursor": "pointer"},
        "encoding": {
            "x": {
                "field": "col",
                "type": "quantitative",
                "scale": {"domain": [-0.5, columns - 0.5], "nice": False, "zero": False},
                "axis": None,
            },
            "y": {
                "field": "row",
                "type": "quantitative",
                "scale": {
                    "domain": [-0.5, n_rows - 0.5],
                    "reverse": True,
                    "nice": False,
                    "zero": False,
                },
                "axis": {
                    "title": None,
                    "values": vals,
                    "labelExpr": f"{labels} : ''" if vals else "''",
                    "ticks": False,
                    "domain": False,
                    "labelLimit": GRID_LABEL_PX - 10,
                    "labelFontSize": 11,
                    "minExtent": GRID_LABEL_PX,
                    "maxExtent": GRID_LABEL_PX,
                },
            },
            "color": {
                "field": "legend",
                "type": "nominal",
                "scale": {
                    "domain": [legend[s] for s in present],
                    "range": [STATE_COLOR[s] for s in present],
                },
                "legend": {"orient": "bottom", "title": None, "columns": 3, "labelFontSize": 11},
            },
            "tooltip": [
                {"field": "node"},
                {"field": "group"},
                {"field": "state"},
                {"field": "reason", "title": "why"},
                {"field": "gpus", "title": "GPUs"},
            ],
        },
    }


def _js(text: str) -> str:
    """``text`` as a Vega expression string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"

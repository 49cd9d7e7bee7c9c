"""The Reliability page's five charts as Vega-Lite specs (``st.vega_lite_chart``).

The first page to draw a plotly chart paid 1.2-2 s for the browser to load plotly.js; Vega is
loaded by the overview already, so with these the page never loads it. Each function takes what
the ``reports.reliability`` figure it replaces takes (the HTML report keeps those) and keeps its
look: the same titles, colours, axis titles, log axes, histogram bins (plotly's own, computed
here), legend entries and hover fields. It returns ``(data, spec)``; an empty input gives a chart
that says what the figure says. The shared pieces are in ``vega``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from faultlens.app.dashboard.vega import Chart, _js, _spec, empty
from faultlens.app.dashboard.vega import colors as vega_colors
from faultlens.reports.chart_style import PALETTE

if TYPE_CHECKING:
    from faultlens.reports.reliability import ReliabilityView

REPAIR_BINS = 40  # the repair histogram's ``nbinsx``
REPAIR_TICKS_H = (0.01, 0.1, 1, 10, 100, 1000)
EMPIRICAL_POINTS = 400  # about this many points of the empirical survival are drawn
CURVE_POINTS = 80
HOURS_PER_YEAR = 8766.0
HOURS_FORMAT = ",.3~r"  # hovers: 0.0158, 1.58, 3,980 (three digits, no exponent)
TICKS = 6  # about as many ticks on a linear x axis (Vega's default put labels end to end)
# counts: 500, 5k, 12k (each label on its own: a shared prefix gave "0k" and "0.5k")
_COUNT_AXIS = {"labelExpr": "format(datum.value, '~s')", "tickMinStep": 1, "tickCount": TICKS}
# log axes: plain numbers from 0.001 to 9999, SI prefixes beyond (``100µ``, ``10k``), as plotly
_LOG_LABELS = (
    "datum.value >= 0.001 && datum.value < 10000 ? format(datum.value, '~g') "
    ": format(datum.value, '~s')"
)


def _q(field: str, title: str | None, **kw: Any) -> dict[str, Any]:
    return {"field": field, "type": "quantitative", "title": title, **kw}


def _colors(names: list[str], colors: list[str]) -> dict[str, Any]:
    """A nominal colour encoding of ``series``: ``names`` in ``colors``, the legend right of the
    plot in that order (none for a single name, as plotly shows none for a single trace)."""
    encoding = vega_colors("series", names, colors)
    return encoding if len(names) > 1 else {**encoding, "legend": None}


def _decades(lo: float, hi: float, most: int = 6) -> list[float]:
    """Powers of ten from below ``lo`` to above ``hi``, every n-th so at most ``most`` are
    labelled (a log axis' ticks)."""
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    step = max(1, math.ceil((last - first + 1) / most))
    return [10.0**e for e in range(first, last + 1) if e % step == 0]  # 1 among them


def _log_axis(field: str, title: str, values: np.ndarray) -> dict[str, Any]:
    ticks = _decades(float(values.min()), float(values.max()))
    return _q(
        field,
        title,
        scale={"type": "log"},
        axis={"values": ticks, "labelExpr": _LOG_LABELS, "labelOverlap": True},
    )


# -- the charts ------------------------------------------------------------------------------------
def failure_categories(doc: dict[str, Any]) -> Chart:
    """Failures per category as horizontal bars, the most first; the category's MTBF per node in
    the hover (node-hours over its failures: the rows' ``mtbf_h`` combined)."""
    rows = doc.get("by_category") or []
    title = "Failures by category (count; MTBF per node in the hover)"
    if not rows:
        return empty(title)
    data = (
        pl.DataFrame(rows)
        .group_by(pl.col("category").cast(pl.String).fill_null("unknown"))
        .agg(
            pl.col("count").sum().alias("failures"),
            (1.0 / (1.0 / pl.col("mtbf_h").cast(pl.Float64)).sum()).alias("mtbf_node_h"),
        )
        .sort(["failures", "category"], descending=[True, False])
    )
    return data, _spec(
        title,
        mark={"type": "bar", "color": PALETTE[0]},
        encoding={
            # the most first: an explicit order (the rows' own order is lost when the page
            # swaps this chart's data for another dataset's)
            "y": {
                "field": "category",
                "type": "nominal",
                "sort": data["category"].to_list(),
                "title": None,
            },
            "x": _q("failures", "failures", axis=_COUNT_AXIS),
            "tooltip": [
                {"field": "category"},
                _q("failures", "failures", format=","),
                _q("mtbf_node_h", "MTBF per node (h)", format=",.0f"),
            ],
        },
    )


def plotly_bins(values: np.ndarray, nbins: int) -> np.ndarray:
    """The bin edges plotly.js draws for ``go.Histogram(x=values, nbinsx=nbins)`` (its
    ``autoBin`` on a linear axis): the size is 2, 5 or 10 times the power of ten below
    span / ``nbins`` (the first above it), edges on its multiples from below the smallest value,
    shifted half a bin when most values would sit on an edge (integers: half a unit)."""
    lo, hi = float(values.min()), float(values.max())
    rough = (hi - lo) / nbins
    size = 1.0
    if rough > 0:
        # as plotly.js computes it (log / LN10 is not always log10: 1000 gives 2.9999...)
        base = 10.0 ** math.floor(math.log(rough) / math.log(10))
        size = base * next((m for m in (2, 5) if m > rough / base), 10)
    start = math.ceil(lo / size) * size - size

    def near_edge(v: np.ndarray) -> np.ndarray:  # within 1% of a bin edge
        return np.fmod(1 + (v - start) * 100 / size, 100) < 2

    if bool(np.all(np.fmod(values, 1) == 0)):
        if size < 1:
            start = lo - 0.5 * size
        else:
            start -= 0.5
            start += size if start + size < lo else 0
    elif near_edge(values + size / 2).sum() < 0.1 * len(values):
        edge = near_edge(np.array([lo, hi]))
        if near_edge(values).sum() > 0.3 * len(values) or edge.any():
            start += size / 2 if start + size / 2 < lo else -size / 2
    n = 1 + math.floor((hi - start) / size)
    return start + size * np.arange(n + 1)


def repair_times(failures: pl.DataFrame) -> Chart:
    """Failures per repair-time bin on a log axis: plotly's 40 bins of log10(hours), each bar
    from its first to its last hour, the range in the hover."""
    title = "Repair time (hours, log scale)"
    r = failures["repair_h"].drop_nulls().drop_nans() if failures.height else pl.Series([])
    r = r.filter(r > 0) if r.len() else r
    if r.len() == 0:
        return empty(title, "no repair times recorded")
    logs = np.log10(r.to_numpy().astype(float))
    edges = plotly_bins(logs, REPAIR_BINS)
    # a value on an edge is the upper bin's (plotly's ``findBin``, within 1e-9 of a bin)
    index = np.floor((logs - edges[0]) / (edges[1] - edges[0]) + 1e-9).astype(int)
    counts = np.bincount(np.clip(index, 0, len(edges) - 2), minlength=len(edges) - 1)
    data = pl.DataFrame(
        {"from_h": 10.0 ** edges[:-1], "to_h": 10.0 ** edges[1:], "failures": counts}
    ).cast({"failures": pl.Int64})
    lo_h, hi_h = 10.0 ** edges[0], 10.0 ** edges[-1]
    ticks = [v for v in REPAIR_TICKS_H if r.min() / 10 <= v <= r.max() * 10 and lo_h <= v <= hi_h]
    return data, _spec(
        title,
        mark={"type": "bar", "color": PALETTE[1]},
        encoding={
            "x": _q(
                "from_h",
                "repair hours",
                scale={"type": "log", "domain": [lo_h, hi_h], "nice": False},
                axis={"values": ticks, "format": "~g", "grid": False},
            ),
            "x2": {"field": "to_h"},
            "y": _q("failures", "failures", axis=_COUNT_AXIS),
            "y2": {"datum": 0},
            "tooltip": [
                _q("from_h", "from (h)", format=HOURS_FORMAT),
                _q("to_h", "to (h)", format=HOURS_FORMAT),
                _q("failures", "failures", format=","),
            ],
        },
    )


def gap_weibull(gaps_h: np.ndarray, doc: dict[str, Any]) -> Chart:
    """Survival of the time between failures of a node (points) against the fitted Weibull and
    an exponential of the same mean (lines), log-log: a straight line of slope ``shape`` is a
    Weibull. Points where a curve reaches 0 are left out (a log axis has no 0)."""
    title = "Time between failures per node: empirical vs Weibull vs exponential"
    x = np.sort(gaps_h[np.isfinite(gaps_h) & (gaps_h > 0)])
    w = doc.get("weibull") or {}
    if len(x) < 3 or w.get("shape") is None:
        return empty(title, "fewer than 3 repeat failures of a node")
    names = ["empirical", f"Weibull k={w['shape']:.2f}", "exponential"]
    surv = 1.0 - (np.arange(1, len(x) + 1) - 0.5) / len(x)
    step = max(1, len(x) // EMPIRICAL_POINTS)
    grid = np.geomspace(x[0], x[-1], CURVE_POINTS)
    curves = (
        (names[0], x[::step], surv[::step]),
        (names[1], grid, np.exp(-((grid / w["scale"]) ** w["shape"]))),
        (names[2], grid, np.exp(-grid / x.mean())),
    )
    data = pl.concat(
        pl.DataFrame({"series": name, "hours": hours, "p": p}) for name, hours, p in curves
    ).filter(pl.col("p") > 0)
    # one legend: a dot for the points, a line (dotted for the exponential) for each curve
    shape = f"datum.value === {_js(names[0])} ? 'circle' : 'stroke'"
    dash = f"datum.value === {_js(names[2])} ? [3, 3] : []"
    color = _colors(names, list(PALETTE[:3]))
    color["legend"] = {
        **color["legend"],
        "symbolStrokeWidth": 2,
        "symbolSize": 60,
        "encode": {
            "symbols": {
                "update": {
                    "shape": {"signal": shape},
                    "strokeDash": {"signal": dash},
                    "stroke": {"scale": "color", "field": "value"},
                }
            }
        },
    }
    line_dash = {
        "field": "series",
        "type": "nominal",
        "scale": {"domain": names, "range": [[1, 0], [1, 0], [3, 3]]},
        "legend": None,
    }
    tooltip = [
        {"field": "series", "title": "curve"},
        _q("hours", "hours", format=HOURS_FORMAT),
        _q("p", "P(gap > t)", format=".3~g"),
    ]
    spec = _spec(
        title,
        encoding={
            "x": _log_axis("hours", "hours", data["hours"].to_numpy()),
            "y": _log_axis("p", "P(gap > t)", data["p"].to_numpy()),
            "color": color,
            "tooltip": tooltip,
        },
        layer=[
            {
                "transform": [{"filter": f"datum.series === {_js(names[0])}"}],
                "mark": {"type": "point", "filled": True, "size": 16, "opacity": 1},
            },
            {
                "transform": [{"filter": f"datum.series !== {_js(names[0])}"}],
                "mark": {"type": "line", "strokeWidth": 2},
                "encoding": {"strokeDash": line_dash},
            },
        ],
    )
    head, tail = title.split(": ")
    return data, {**spec, "title": [f"{head}:", tail]}  # wider than a half-width column


def lemons(failures: pl.DataFrame) -> Chart:
    """The cumulative share of failures over the nodes, worst first (a lemon curve); the node,
    its failures and the share so far in the hover."""
    title = "Failures per node, worst first (cumulative share)"
    if failures.height == 0:
        return empty(title)
    data = (
        failures.group_by("node")
        .len("failures")
        .sort(["failures", "node"], descending=[True, False])
        .with_columns(
            pl.int_range(1, pl.len() + 1).alias("rank"),
            (pl.col("failures").cum_sum() / pl.col("failures").sum()).alias("share"),
        )
        .cast({"failures": pl.Int64, "rank": pl.Int64})
    )
    return data, _spec(
        title,
        mark={"type": "line", "color": PALETTE[3], "strokeWidth": 2},
        encoding={
            "x": _q("rank", "nodes (worst first)", axis={"tickMinStep": 1, "tickCount": TICKS}),
            "y": _q("share", "share of failures"),
            "tooltip": [
                _q("rank", "node rank"),
                {"field": "node"},
                _q("failures", "failures", format=","),
                _q("share", "share of failures", format=".1%"),
            ],
        },
    )


def survival(km: pl.DataFrame) -> Chart:
    """Kaplan-Meier survival of units over years in service, a step line per batch (each
    step holds until the next failure time)."""
    title = "Kaplan-Meier survival of units (by batch)"
    if km.height == 0:
        return empty(title, "no unit lifetimes in this dataset")
    data = km.select(
        pl.col("batch").cast(pl.String).alias("series"),
        (pl.col("time_h") / HOURS_PER_YEAR).alias("years"),
        "survival",
    ).sort("series", "years")
    names = sorted(data["series"].unique().to_list())
    return data, _spec(
        title,
        mark={"type": "line", "interpolate": "step-after", "strokeWidth": 2},
        encoding={
            "x": _q("years", "years in service", axis={"tickCount": TICKS}),
            "y": _q("survival", "surviving", scale={"zero": False}),
            "color": _colors(names, [PALETTE[i % 8] for i in range(len(names))]),
            "tooltip": [
                {"field": "series", "title": "batch"},
                _q("years", "years", format=".2f"),
                _q("survival", "surviving", format=".3f"),
            ],
        },
    )


def charts_of(view: ReliabilityView) -> list[Chart]:
    """The page's charts, in ``reports.reliability.figures_of``'s order."""
    return [
        failure_categories(view.doc),
        repair_times(view.failures),
        gap_weibull(view.gaps_h, view.doc),
        lemons(view.failures),
        survival(view.km),
    ]

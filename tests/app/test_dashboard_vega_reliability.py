"""The Reliability page's Vega-Lite charts: what each spec says, on hand-made inputs (the page
itself, drawn from a hand-made dataset, is in ``test_dashboard_reliability``)."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from faultlens.app.dashboard import vega_reliability as VR
from faultlens.reports.chart_style import PALETTE
from faultlens.reports.reliability import ReliabilityView

NODE_HOURS = 1200.0  # the fleet's node-hours behind the category rows' MTBF
# (level, class, category, failures)
CATEGORY_ROWS = [
    ("Hardware", "CPU", "host", 3),
    ("Software", "OS", "software", 2),
    ("Network", "Switch", "network", 2),
    ("Hardware", "Memory", "host", 1),
]


def _doc(shape: float | None = 0.8, scale: float | None = 5.0) -> dict:
    return {
        "by_category": [
            {"level": lv, "class": cl, "category": cat, "count": n, "mtbf_h": NODE_HOURS / n}
            for lv, cl, cat, n in CATEGORY_ROWS
        ],
        "weibull": {"shape": shape, "scale": scale, "shape_ci": [None, None]},
    }


def _fields(spec: dict) -> list[str]:
    return [t["field"] for t in spec["encoding"]["tooltip"]]


def test_failure_categories_add_up_a_categorys_rows_most_first() -> None:
    data, spec = VR.failure_categories(_doc())
    assert spec["title"] == "Failures by category (count; MTBF per node in the hover)"
    rows = {r["category"]: r for r in data.iter_rows(named=True)}
    assert rows["host"]["failures"] == 3 + 1
    assert rows["host"]["mtbf_node_h"] == pytest.approx(NODE_HOURS / 4)
    assert rows["network"]["mtbf_node_h"] == pytest.approx(NODE_HOURS / 2)
    # most failures on top; network and software tie at 2: by name
    assert spec["encoding"]["y"]["sort"] == ["host", "network", "software"]
    assert data["category"].to_list() == ["host", "network", "software"]
    assert spec["mark"] == {"type": "bar", "color": PALETTE[0]}
    assert spec["encoding"]["x"]["field"] == "failures"
    assert spec["encoding"]["x"]["title"] == "failures"
    assert _fields(spec) == ["category", "failures", "mtbf_node_h"]
    assert spec["encoding"]["tooltip"][2]["format"] == ",.0f"


# repair hours 1, 10, 100, 1000: log10 0..3, all integers. plotly.js' ``autoBin`` with 40 bins:
# span 3 / 40 = 0.075, rounded up to 0.1 (2, 5 or 10 times a power of ten); integers with a
# bin under 1 are centred: the first edge is 0 - 0.1 / 2, the last after 3, 31 bins.
def test_repair_times_are_plotlys_bins_of_log_hours_drawn_in_hours() -> None:
    failures = pl.DataFrame(
        {"repair_h": [None, math.nan, 0.0, -2.0, 1.0, 10.0, 100.0, 1000.0]},
        schema={"repair_h": pl.Float64},
    )
    data, spec = VR.repair_times(failures)
    assert spec["title"] == "Repair time (hours, log scale)"
    assert data.height == 31
    assert data["from_h"][0] == pytest.approx(10**-0.05)
    assert data["to_h"][0] == pytest.approx(10**0.05)
    assert data["to_h"][-1] == pytest.approx(10**3.05)
    # each value in the bin it centres: 0, 10, 20, 30; no others
    counts = data["failures"].to_list()
    assert [i for i, n in enumerate(counts) if n] == [0, 10, 20, 30]
    assert sum(counts) == 4
    enc = spec["encoding"]
    assert (enc["x"]["field"], enc["x2"]["field"], enc["y"]["field"]) == (
        "from_h",
        "to_h",
        "failures",
    )
    assert enc["x"]["scale"]["type"] == "log"
    assert enc["x"]["scale"]["domain"] == pytest.approx([10**-0.05, 10**3.05])
    assert enc["x"]["axis"]["values"] == [1, 10, 100, 1000]  # 0.1 is left of the first bar
    assert (enc["x"]["title"], enc["y"]["title"]) == ("repair hours", "failures")
    assert spec["mark"]["color"] == PALETTE[1]
    assert _fields(spec) == ["from_h", "to_h", "failures"]


def test_repair_bins_shift_half_a_bin_when_values_sit_on_edges() -> None:
    """log10 hours 0.31, 0.55, 0.55, 1.29: a span of 0.98 / 40 rounds to bins of 0.05 from 0.30;
    two of four values sit on the edge 0.55, none mid-bin: plotly moves the edges half a bin
    down (0.275), and 0.55 falls in bin (0.55 - 0.275) / 0.05 = 5.5, the 6th."""
    logs = np.array([0.31, 0.55, 0.55, 1.29])
    edges = VR.plotly_bins(logs, 40)
    assert edges[0] == pytest.approx(0.275)
    assert edges[1] - edges[0] == pytest.approx(0.05)
    assert len(edges) - 1 == 1 + math.floor((1.29 - 0.275) / 0.05)
    data, _ = VR.repair_times(pl.DataFrame({"repair_h": 10.0**logs}))
    counts = data["failures"].to_list()
    assert {i: n for i, n in enumerate(counts) if n} == {0: 1, 5: 2, 20: 1}


GAPS_H = np.array([4.0, 1.0, 8.0, 2.0, math.nan, -1.0, 0.0])  # four usable, unsorted


def test_gap_weibull_draws_the_empirical_points_under_both_fits() -> None:
    data, spec = VR.gap_weibull(GAPS_H, _doc(shape=0.8, scale=5.0))
    assert spec["title"] == [
        "Time between failures per node:",
        "empirical vs Weibull vs exponential",
    ]
    emp = data.filter(pl.col("series") == "empirical")
    assert emp["hours"].to_list() == [1.0, 2.0, 4.0, 8.0]
    # 1 - (i - 1/2) / n
    assert emp["p"].to_list() == pytest.approx([0.875, 0.625, 0.375, 0.125])
    weibull = data.filter(pl.col("series") == "Weibull k=0.80")
    assert weibull.height == VR.CURVE_POINTS
    assert weibull["hours"][0] == pytest.approx(1.0) and weibull["hours"][-1] == pytest.approx(8)
    assert weibull["p"][0] == pytest.approx(math.exp(-((1 / 5) ** 0.8)))
    assert weibull["p"][-1] == pytest.approx(math.exp(-((8 / 5) ** 0.8)))
    expo = data.filter(pl.col("series") == "exponential")
    mean_h = (1 + 2 + 4 + 8) / 4
    assert expo["p"][-1] == pytest.approx(math.exp(-8 / mean_h))
    enc = spec["encoding"]
    assert enc["x"]["scale"]["type"] == "log" and enc["y"]["scale"]["type"] == "log"
    assert (enc["x"]["title"], enc["y"]["title"]) == ("hours", "P(gap > t)")
    assert enc["color"]["scale"] == {
        "domain": ["empirical", "Weibull k=0.80", "exponential"],
        "range": list(PALETTE[:3]),
    }
    assert enc["color"]["legend"]["orient"] == "right"
    points, lines = spec["layer"]
    assert points["mark"]["type"] == "point" and lines["mark"]["type"] == "line"
    assert lines["encoding"]["strokeDash"]["scale"]["range"][2] != [1, 0]  # exponential dotted
    assert _fields(spec) == ["series", "hours", "p"]
    # 1 on the y axis, every other power of ten at most six labels
    assert 1.0 in enc["y"]["axis"]["values"]


def test_gap_weibull_leaves_out_zeros_and_thins_many_points() -> None:
    # shape 5, scale 1: at 8 h the Weibull survival is exp(-8**5), 0 in floats (no log of it)
    data, _ = VR.gap_weibull(GAPS_H, _doc(shape=5.0, scale=1.0))
    assert data["p"].min() > 0
    assert data.filter(pl.col("series") == "Weibull k=5.00").height < VR.CURVE_POINTS
    many = np.arange(1.0, 1001.0)
    data, _ = VR.gap_weibull(many, _doc())
    assert data.filter(pl.col("series") == "empirical").height == 1000 // 2  # every 2nd


def test_lemons_accumulate_the_worst_nodes_first() -> None:
    failures = pl.DataFrame({"node": ["a", "b", "c", "a", "c", "a"]})
    data, spec = VR.lemons(failures)
    assert spec["title"] == "Failures per node, worst first (cumulative share)"
    assert data["node"].to_list() == ["a", "c", "b"]
    assert data["rank"].to_list() == [1, 2, 3]
    assert data["failures"].to_list() == [3, 2, 1]
    assert data["share"].to_list() == pytest.approx([3 / 6, 5 / 6, 1.0])
    assert spec["mark"]["color"] == PALETTE[3]
    enc = spec["encoding"]
    assert (enc["x"]["field"], enc["y"]["field"]) == ("rank", "share")
    assert (enc["x"]["title"], enc["y"]["title"]) == ("nodes (worst first)", "share of failures")
    assert enc["tooltip"][3]["format"] == ".1%"


def test_survival_steps_per_batch_in_years() -> None:
    km = pl.DataFrame(
        {
            "time_h": [0.0, 8766.0, 2 * 8766.0, 0.0, 4383.0],
            "survival": [1.0, 0.9, 0.7, 1.0, 0.5],
            "batch": ["old", "old", "old", "new", "new"],
        }
    )
    data, spec = VR.survival(km)
    assert spec["title"] == "Kaplan-Meier survival of units (by batch)"
    old = data.filter(pl.col("series") == "old")
    assert old["years"].to_list() == pytest.approx([0.0, 1.0, 2.0])
    assert old["survival"].to_list() == [1.0, 0.9, 0.7]
    assert data.filter(pl.col("series") == "new")["years"].to_list() == pytest.approx([0, 0.5])
    assert spec["mark"]["interpolate"] == "step-after"
    color = spec["encoding"]["color"]
    assert color["scale"] == {"domain": ["new", "old"], "range": list(PALETTE[:2])}
    assert color["legend"]["orient"] == "right"
    enc = spec["encoding"]
    assert (enc["x"]["title"], enc["y"]["title"]) == ("years in service", "surviving")
    assert _fields(spec) == ["series", "years", "survival"]
    # one batch: no legend (plotly shows none for one line)
    _, spec = VR.survival(km.filter(pl.col("batch") == "old"))
    assert spec["encoding"]["color"]["legend"] is None


def test_every_reliability_chart_says_so_when_empty() -> None:
    no_failures = pl.DataFrame(schema={"node": pl.String, "repair_h": pl.Float64})
    for (data, spec), what in (
        (VR.failure_categories({}), "no data in this range"),
        (VR.repair_times(no_failures), "no repair times recorded"),
        (VR.repair_times(pl.DataFrame({"repair_h": [0.0, None]})), "no repair times recorded"),
        (VR.gap_weibull(np.array([1.0, 2.0]), _doc()), "fewer than 3 repeat failures of a node"),
        (VR.gap_weibull(GAPS_H, _doc(shape=None)), "fewer than 3 repeat failures of a node"),
        (VR.lemons(no_failures), "no data in this range"),
        (VR.survival(pl.DataFrame()), "no unit lifetimes in this dataset"),
    ):
        assert data is None
        assert spec["data"]["values"] == [{"text": what}]
        assert spec["mark"]["type"] == "text"


def test_charts_of_a_view_are_the_reports_five_in_its_order() -> None:
    failures = pl.DataFrame({"node": ["a", "a"], "repair_h": [1.0, 3.0]})
    view = ReliabilityView(_doc(), failures, GAPS_H, pl.DataFrame())
    titles = [spec["title"] for _, spec in VR.charts_of(view)]
    assert titles == [
        "Failures by category (count; MTBF per node in the hover)",
        "Repair time (hours, log scale)",
        ["Time between failures per node:", "empirical vs Weibull vs exponential"],
        "Failures per node, worst first (cumulative share)",
        "Kaplan-Meier survival of units (by batch)",
    ]

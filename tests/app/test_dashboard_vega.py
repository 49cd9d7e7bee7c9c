"""The overview's and the node page's Vega-Lite charts: what each spec says, before a browser draws it (the browser
tests in ``test_dashboard_screens`` draw them, click the grid and check every label's frame)."""

from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl

from faultlens.app.dashboard import vega
from faultlens.reports.chart_style import PALETTE, SEVERITY_COLOR, STATE_COLOR


def _fleet() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "group": ["b", "a", "a", "a", "o'neil"],
            "node": ["b1", "a1", "a2", "a3", "c1"],
            "state": ["healthy", "healthy", "healthy", "down", "degraded"],
            "reason": ["", "", "", "Xid 79", None],
            "gpus": ["", "", "", "gpu 3: Xid 79 ×1<br>gpu 5: Xid 48 ×2", None],
            "score": [None] * 5,
        }
    )


def test_fleet_grid_has_one_square_per_node_coloured_by_its_state() -> None:
    data, spec = vega.fleet_grid(_fleet())
    assert data is not None
    assert sorted(data["node"]) == ["a1", "a2", "a3", "b1", "c1"]
    state = dict(zip(data["node"], data["state"], strict=True))
    assert state["a3"] == "down" and state["c1"] == "degraded" and state["b1"] == "healthy"
    # the legend counts the states present, each in its state's colour (absent ones left out)
    scale = spec["encoding"]["color"]["scale"]
    assert scale["domain"] == ["down (1)", "degraded (1)", "healthy (3)"]
    assert scale["range"] == [STATE_COLOR["down"], STATE_COLOR["degraded"], STATE_COLOR["healthy"]]
    legend = dict(zip(data["node"], data["legend"], strict=True))
    assert legend["a3"] == "down (1)" and legend["a1"] == "healthy (3)"


def test_fleet_grid_hover_shows_the_gpus_and_a_click_selects_the_node() -> None:
    data, spec = vega.fleet_grid(_fleet())
    row = data.filter(pl.col("node") == "a3").row(0, named=True)
    assert row["gpus"] == "gpu 3: Xid 79 ×1; gpu 5: Xid 48 ×2"  # one line, no markup
    assert row["reason"] == "Xid 79"
    assert data.filter(pl.col("node") == "c1")["reason"].to_list() == [""]  # null shown empty
    tooltip = [t["field"] for t in spec["encoding"]["tooltip"]]
    assert tooltip == ["node", "group", "state", "reason", "gpus"]
    (param,) = spec["params"]
    assert param["name"] == vega.PICK
    assert param["select"] == {"type": "point", "fields": ["node"], "on": "click"}


def test_fleet_grid_names_each_group_at_its_first_row() -> None:
    data, spec = vega.fleet_grid(_fleet())
    axis = spec["encoding"]["y"]["axis"]
    firsts = data.group_by("group").agg(pl.col("row").min())
    assert sorted(axis["values"]) == sorted(firsts["row"])
    for group, row in firsts.iter_rows():
        quoted = "'" + group.replace("'", "\\'") + "'"
        assert f"datum.value === {row} ? {quoted}" in axis["labelExpr"]
    # the group with a down node comes first (rows 0-...), the healthy one last
    first_row = dict(firsts.iter_rows())
    assert first_row["a"] == 0 and first_row["b"] == max(first_row.values())


def test_every_overview_chart_says_so_when_empty() -> None:
    empty = pl.DataFrame()
    for fn, what in (
        (vega.fleet_grid, "no nodes in the database"),
        (vega.mtbf, "no failures in this range"),
        (vega.top_xids, "no Xid events in this range"),
        (vega.failure_trend, "no data in this range"),
    ):
        data, spec = fn(empty)
        assert data is None
        assert spec["data"]["values"] == [{"text": what}]
        assert spec["mark"]["type"] == "text"


def test_top_xids_keep_the_queries_order_and_catalog_labels() -> None:
    frame = pl.DataFrame(
        {
            "xid": [79, 13],
            "name": ["GPU_HAS_FALLEN_OFF_THE_BUS (GPU has fallen off the bus)", None],
            "events": [9, 4],
            "nodes": [2, 1],
        }
    )
    data, spec = vega.top_xids(frame)
    assert data["xid"].to_list()[1] == "Xid 13"
    assert data["xid"].to_list()[0].startswith("Xid 79 GPU_HAS_FALLEN")
    assert data["events"].to_list() == [9, 4]
    # most events first, as the query orders them, from the rows' rank: a sort of None keeps the
    # first data's order in the browser when a filter change swaps the data in place
    assert data["rank"].to_list() == [0, 1]
    assert spec["encoding"]["y"]["sort"] == {"field": "rank", "op": "min"}


def test_mtbf_bars_keep_the_queries_order_after_a_data_change() -> None:
    frame = pl.DataFrame(
        {
            "component": ["GPU", "NIC", "SSD"],
            "mtbf_node_h": [10.0, 80.0, 40.0],
            "failures": [8, 1, 2],
        }
    )
    data, spec = vega.mtbf(frame)
    order = data.sort("rank")["component"].to_list()
    assert order == ["GPU", "NIC", "SSD"]
    assert spec["encoding"]["x"]["sort"] == {"field": "rank", "op": "min"}


def test_node_events_span_the_range_with_the_severities_present() -> None:
    frame = pl.DataFrame(
        {
            "ts": [datetime(2025, 3, 3, 10), datetime(2025, 3, 6, 3)],
            "kind": ["xid", "node_drain"],
            "gpu": ["0000:3b:00.0", ""],
            "severity": ["critical", "warning"],
            "code": [79, None],
            "message": ["NVRM: Xid 79", "drained"],
        }
    )
    since, until = datetime(2025, 3, 1), datetime(2025, 3, 8)
    data, spec = vega.node_events(frame, since, until)
    assert data is not None and data.height == 2
    lo, hi = spec["encoding"]["x"]["scale"]["domain"]
    assert (lo["year"], lo["month"], lo["date"], lo["hours"]) == (2025, 3, 1, 0)
    assert (hi["month"], hi["date"]) == (3, 8)
    assert "utc" not in lo  # naive UTC stamps are read as the browser's local time: so is this
    color = spec["encoding"]["color"]["scale"]
    assert color["domain"] == ["warning", "error", "critical"]  # the same colours on any node
    assert color["range"] == [SEVERITY_COLOR[s] for s in ("warning", "error", "critical")]
    assert "message" in [t["field"] for t in spec["encoding"]["tooltip"]]
    # without a range the axis is the events' own
    assert "scale" not in vega.node_events(frame)[1]["encoding"]["x"]


def _telemetry(hours: list[float], gpus: tuple[int, ...] = (0, 1)) -> pl.DataFrame:
    start = datetime(2025, 3, 1)
    return pl.DataFrame(
        {
            "ts": [start + timedelta(hours=h) for _ in gpus for h in hours],
            "gpu": [g for g in gpus for _ in hours],
            "value": [50.0 + g for g in gpus for _ in hours],
        },
        schema={"ts": pl.Datetime("us"), "gpu": pl.Int32, "value": pl.Float64},
    )


def test_telemetry_draws_a_line_per_gpu_that_stops_at_a_hole() -> None:
    hours = [*range(40), *range(60, 100)]  # hourly, then 20 hours without samples
    data, spec = vega.telemetry(_telemetry(hours), "DCGM_FI_DEV_GPU_TEMP")
    assert data is not None
    segments = data.group_by("series").agg(pl.col("segment").n_unique())
    assert dict(segments.iter_rows()) == {"gpu 0": 2, "gpu 1": 2}
    assert data["segment"].n_unique() == 4  # a GPU's segment is never another's
    enc = spec["encoding"]
    assert enc["detail"]["field"] == "segment" and enc["color"]["field"] == "series"
    assert enc["color"]["sort"] == {"field": "gpu", "op": "min"}  # gpu 2 before gpu 10
    assert enc["y"]["title"] == "gpu_temp"
    assert spec["mark"] == {"type": "line", "point": False}  # 80 samples a GPU: a plain line
    assert "scale" not in enc["x"]  # a span of days: the samples' own axis


def test_telemetry_of_a_few_samples_in_minutes_gets_points_and_an_hours_axis() -> None:
    data, spec = vega.telemetry(_telemetry([0.0, 0.01, 0.02], gpus=(3,)))
    assert spec["mark"]["point"] is True
    lo, hi = spec["encoding"]["x"]["scale"]["domain"]
    assert (lo["date"], lo["hours"]) == (28, 23)  # an hour before the first sample
    assert (hi["date"], hi["hours"], hi["minutes"]) == (1, 1, 1)  # an hour after the last


def test_empty_node_charts_keep_the_drawn_charts_spec() -> None:
    """No events or no samples: the chart a node with them gets, without rows (the browser
    then swaps the data of one view, instead of building a text chart and back)."""
    since, until = datetime(2025, 3, 1), datetime(2025, 3, 8)
    events = pl.DataFrame(
        {
            "ts": [datetime(2025, 3, 3, 10)],
            "kind": ["xid"],
            "gpu": [""],
            "severity": ["critical"],
            "code": [79],
            "message": ["NVRM: Xid 79"],
        }
    )
    data, spec = vega.node_events(pl.DataFrame(), since, until)
    assert (
        data is not None
        and data.height == 0
        and data.columns == vega.node_events(events, since, until)[0].columns
    )
    assert spec == vega.node_events(events, since, until)[1]
    data, spec = vega.telemetry(pl.DataFrame(), "DCGM_FI_DEV_GPU_TEMP")
    drawn = vega.telemetry(_telemetry([float(h) for h in range(80)]), "DCGM_FI_DEV_GPU_TEMP")
    assert data is not None and data.height == 0 and data.columns == drawn[0].columns
    assert spec == drawn[1]
    assert spec["mark"]["point"] is False  # no samples is not "few samples"


def test_event_timeline_stacks_the_largest_group_first() -> None:
    day = datetime(2025, 3, 1)
    frame = pl.DataFrame(
        {
            "bucket": [day, day, day + timedelta(days=1)],
            "source": ["nccl", "kernel", "kernel"],
            "events": [2, 5, 4],
        }
    )
    data, spec = vega.event_timeline(frame)
    assert spec["title"] == "Events over time by source"
    color = spec["encoding"]["color"]
    assert color["scale"]["domain"] == ["kernel", "nccl"]  # 9 events before 2
    assert color["scale"]["range"][:2] == list(PALETTE[:2])
    assert dict(zip(data["group"], data["order"], strict=True)) == {"kernel": 0, "nccl": 1}
    assert spec["encoding"]["y"]["stack"] is True
    assert vega.event_timeline(pl.DataFrame())[0] is None

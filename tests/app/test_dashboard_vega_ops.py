"""The jobs, recovery and data-health pages' Vega-Lite charts (``app.dashboard.vega_ops``): what
each spec says before a browser draws it, and that those pages draw no plotly chart."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from faultlens.app.dashboard import vega_ops
from faultlens.reports.chart_style import PALETTE
from tests.app.smallapp import small_app

CAUSES = ["gpu_hardware", "network", "software"]
INTERRUPTIONS = [5, 3, 2]
GPU_HOURS_LOST = [120.5, 40.0, 300.25]

STRATEGIES = ["in-memory", "elastic", "checkpoint"]  # best first, as ``scores_frame`` sorts
ETTR = [0.98, 0.95, 0.90]
ETTR_LO = [0.97, float("nan"), 0.92]  # unknown; above the ETTR
ETTR_HI = [0.99, 0.96, float("nan")]
COST_USD = [250.0, 700.0, 1200.0]
BADPUT = {"badput_checkpoint_save": [60.0, 250.0, 255.0], "badput_restart": [4.0, 8.0, 8.0]}
SPARE_IDLE = [0.0, 0.0, 1400.0]

FORMATS = ["kernel", "a_site_format_with_a_long_name", "slurm_sacct"]
PARSED, NOISE, QUARANTINED = [60, 30, 3], [58, 5, 1], [2, 7, 0]


def _fields(encoding: dict[str, Any]) -> list[str]:
    return [t["field"] for t in encoding["tooltip"]]


def _tooltip(encoding: dict[str, Any], field: str) -> dict[str, Any]:
    (tip,) = [t for t in encoding["tooltip"] if t["field"] == field]
    return tip


def _taxonomy() -> pl.DataFrame:
    total = sum(INTERRUPTIONS)
    return pl.DataFrame(
        {
            "cause": CAUSES,
            "interruptions": INTERRUPTIONS,
            "share_pct": [round(100 * n / total, 1) for n in INTERRUPTIONS],
            "gpu_hours_lost": GPU_HOURS_LOST,
        }
    )


IN_ORDER = {"field": "rank", "op": "min"}  # a category axis in the rows' order


def _in_order(data: pl.DataFrame, column: str) -> list:
    """The categories of ``column`` as the axis lays them out: by their least rank."""
    return data.group_by(column).agg(pl.col("rank").min()).sort("rank")[column].to_list()


def test_taxonomy_draws_bars_of_interruptions_and_gpu_hours_on_a_right_axis() -> None:
    data, spec = vega_ops.taxonomy(_taxonomy())
    assert data is not None
    assert data["cause"].to_list() == CAUSES
    assert data["interruptions"].to_list() == INTERRUPTIONS
    assert data["gpu_hours_lost"].to_list() == GPU_HOURS_LOST
    assert spec["title"] == "Job interruptions by root cause"
    x = spec["encoding"]["x"]
    # the query's order (most first) from the rows' rank, which a data change in place keeps
    assert x["field"] == "cause" and x["sort"] == IN_ORDER
    assert _in_order(data, "cause") == CAUSES
    bars, points = spec["layer"]
    assert bars["mark"]["type"] == "bar" and points["mark"]["type"] == "point"
    assert bars["encoding"]["y"]["field"] == "interruptions"
    assert bars["encoding"]["y"]["axis"]["orient"] == "left"
    assert points["encoding"]["y"]["field"] == "gpu_hours_lost"
    assert points["encoding"]["y"]["axis"]["orient"] == "right"
    assert points["encoding"]["y"]["title"] == "GPU-hours lost"
    assert points["encoding"]["y"]["scale"]["zero"] is True  # the report's "tozero"
    assert spec["resolve"] == {"scale": {"y": "independent"}}


def test_taxonomy_legend_names_both_marks_in_their_colours() -> None:
    _, spec = vega_ops.taxonomy(_taxonomy())
    bars, points = spec["layer"]
    assert bars["encoding"]["color"]["datum"] == "interruptions"
    assert points["encoding"]["color"]["datum"] == "GPU-hours lost"
    scale = bars["encoding"]["color"]["scale"]
    assert scale == points["encoding"]["color"]["scale"]  # one shared legend
    assert scale["domain"] == ["interruptions", "GPU-hours lost"]
    assert scale["range"] == [PALETTE[0], PALETTE[2]]
    shape = bars["encoding"]["color"]["legend"]["encode"]["symbols"]["update"]["shape"]["signal"]
    assert "datum.value === 'interruptions' ? 'square'" in shape
    assert "datum.value === 'GPU-hours lost' ? 'circle'" in shape


def test_taxonomy_hover_gives_the_share_and_the_hours() -> None:
    _, spec = vega_ops.taxonomy(_taxonomy())
    enc = spec["encoding"]
    assert _fields(enc) == ["cause", "interruptions", "share_pct", "gpu_hours_lost"]
    assert _tooltip(enc, "share_pct")["title"] == "% of interruptions"
    assert _tooltip(enc, "gpu_hours_lost")["format"] == ",.1f"


def _scores() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "strategy": STRATEGIES,
            "ettr": ETTR,
            "ettr_lo": ETTR_LO,
            "ettr_hi": ETTR_HI,
            "goodput_gpu_h": [7900.0, 7800.0, 7700.0],
            "cost_usd": COST_USD,
            **BADPUT,
            "spare_idle": SPARE_IDLE,
        }
    )


def test_strategy_ranking_draws_the_interval_and_starts_under_the_lowest_ettr() -> None:
    data, spec = vega_ops.strategy_ranking(_scores())
    assert data is not None
    assert data["strategy"].to_list() == STRATEGIES
    assert data["ettr"].to_list() == ETTR
    # an unknown end is not drawn; an end on the wrong side of the ETTR is drawn at it
    expected_lo = [
        None if math.isnan(lo) else min(lo, e) for lo, e in zip(ETTR_LO, ETTR, strict=True)
    ]
    expected_hi = [
        None if math.isnan(hi) else max(hi, e) for hi, e in zip(ETTR_HI, ETTR, strict=True)
    ]
    assert data["ettr_lo"].to_list() == expected_lo
    assert data["ettr_hi"].to_list() == expected_hi
    bars, errors = spec["layer"]
    assert bars["mark"]["color"] == PALETTE[4]
    assert spec["encoding"]["x"]["sort"] == IN_ORDER
    assert _in_order(data, "strategy") == STRATEGIES  # best first, as the frame
    scale = bars["encoding"]["y"]["scale"]
    assert scale["domain"] == pytest.approx([min(ETTR) - 0.05, 1.0])
    assert scale["clamp"] is True  # the bars start at the axis
    assert errors["mark"]["type"] == "errorbar"
    assert errors["encoding"]["y"]["field"] == "ettr_lo"
    assert errors["encoding"]["y2"]["field"] == "ettr_hi"
    assert errors["encoding"]["y"]["scale"] == scale
    assert _tooltip(spec["encoding"], "cost_usd")["format"] == "$,.0f"
    assert _tooltip(spec["encoding"], "ettr")["format"] == ".4f"


def test_strategy_ranking_axis_starts_at_zero_at_most() -> None:
    frame = _scores().with_columns(pl.Series("ettr", [0.5, 0.2, 0.03]))
    _, spec = vega_ops.strategy_ranking(frame)
    assert spec["layer"][0]["encoding"]["y"]["scale"]["domain"] == [0.0, 1.0]


def test_badput_stacks_the_buckets_in_column_order_with_the_legend_top_first() -> None:
    data, spec = vega_ops.badput(_scores())
    assert data is not None
    buckets = [c.removeprefix("badput_") for c in BADPUT] + ["spare_idle"]
    columns = [*BADPUT.values(), SPARE_IDLE]
    for i, strategy in enumerate(STRATEGIES):
        rows = data.filter(pl.col("strategy") == strategy).sort("order")
        assert rows["group"].to_list() == buckets
        assert rows["gpu_hours"].to_list() == [column[i] for column in columns]
    order = spec["encoding"]["order"]
    assert order["field"] == "order" and order["sort"] == "ascending"  # the first at the bottom
    color = spec["encoding"]["color"]
    assert color["scale"]["domain"] == buckets[::-1]
    assert color["scale"]["range"] == [PALETTE[i] for i in range(len(buckets))][::-1]
    assert spec["encoding"]["x"]["sort"] == IN_ORDER
    assert _in_order(data, "strategy") == STRATEGIES
    assert spec["encoding"]["y"]["title"] == "GPU-hours"
    assert _fields(spec["encoding"]) == ["strategy", "group", "gpu_hours"]


def _ingest(formats: list[str] = FORMATS) -> pl.DataFrame:
    n = len(formats)
    return pl.DataFrame(
        {
            "format": formats,
            "files": [1] * n,
            "parsed": (PARSED * n)[:n],
            "noise": (NOISE * n)[:n],
            "quarantined": (QUARANTINED * n)[:n],
        }
    )


def test_ingest_stacks_parsed_noise_quarantined_per_format_down_the_side() -> None:
    data, spec = vega_ops.ingest(_ingest())
    assert data is not None
    parts = {"parsed": PARSED, "noise": NOISE, "quarantined": QUARANTINED}
    for i, name in enumerate(FORMATS):
        rows = data.filter(pl.col("format") == name).sort("order")
        assert rows["group"].to_list() == list(parts)
        assert rows["lines"].to_list() == [v[i] for v in parts.values()]
    long = FORMATS[1]
    labels = data.filter(pl.col("format") == long)["label"].unique().to_list()
    assert labels == [long[:23] + "…"]  # 24 characters, the report's margin
    y = spec["encoding"]["y"]
    assert y["field"] == "label" and y["sort"] == IN_ORDER  # the query's order, top down
    assert _in_order(data, "format") == FORMATS
    assert spec["encoding"]["x"]["title"] == "lines"
    color = spec["encoding"]["color"]["scale"]
    assert color["domain"] == ["quarantined", "noise", "parsed"]
    assert color["range"] == [PALETTE[2], "#bab0ac", PALETTE[4]]
    assert "format" in _fields(spec["encoding"])  # the whole name in the hover


def test_ingest_grows_with_the_formats() -> None:
    many = [f"format_{i}" for i in range(40)]
    assert vega_ops.ingest(_ingest(many))[1]["height"] == 40 * 18  # 18 px a format
    assert vega_ops.ingest(_ingest())[1]["height"] < 40 * 18


def test_quarantine_reasons_keep_the_twelve_commonest_most_on_top() -> None:
    reasons = [f"reason {i:02d}" for i in range(14)]
    reasons[0] = "a reason that is much longer than the forty characters the axis shows"
    lines = list(range(100, 86, -1))
    frame = pl.DataFrame({"reason": reasons, "lines": lines, "files": [1] * 14})
    data, spec = vega_ops.quarantine_reasons(frame)
    assert data is not None
    assert data["reason"].to_list() == reasons[:12]
    assert data["lines"].to_list() == lines[:12]
    assert data["label"].to_list()[0] == reasons[0][:39] + "…"
    assert data["label"].to_list()[1:] == reasons[1:12]
    assert spec["encoding"]["y"]["sort"] == IN_ORDER
    assert _in_order(data, "reason") == reasons[:12]  # most lines on top
    assert spec["mark"]["color"] == PALETTE[2]
    assert _fields(spec["encoding"]) == ["reason", "lines", "files"]


def test_every_ops_chart_says_so_when_empty() -> None:
    empty = pl.DataFrame()
    no_buckets = pl.DataFrame({"strategy": ["elastic"], "ettr": [0.9]})
    for fn, frame, what in (
        (vega_ops.taxonomy, empty, "no attributed interruptions in this range"),
        (vega_ops.strategy_ranking, empty, "no interruptions to replay in this range"),
        (vega_ops.badput, empty, "no interruptions to replay in this range"),
        (vega_ops.badput, no_buckets, "no interruptions to replay in this range"),
        (vega_ops.ingest, empty, "nothing ingested yet: run `faultlens ingest`"),
        (vega_ops.quarantine_reasons, empty, "nothing quarantined"),
    ):
        data, spec = fn(frame)
        assert data is None
        assert spec["data"]["values"] == [{"text": what}], fn
        assert spec["mark"]["type"] == "text"


def test_jobs_recovery_and_data_health_draw_vega_lite_not_plotly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = small_app(tmp_path, monkeypatch)
    expected = {
        "jobs": ["Job interruptions by root cause"],
        "recovery": ["Recovery strategies: ETTR (95% CI)", "Badput by bucket (GPU-hours)"],
        "data_health": [
            "Lines by format: parsed / noise / quarantined",
            "Quarantined lines by reason",
        ],
    }
    for page, titles in expected.items():
        app.switch_page(f"views/{page}.py").run()
        assert not app.exception, (page, [e.value for e in app.exception])
        specs = [json.loads(c.proto.spec) for c in app.get("vega_lite_chart")]
        assert [s["title"] for s in specs] == titles, page
        assert app.get("plotly_chart") == [], page

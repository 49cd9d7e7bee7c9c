"""The predictions and stragglers pages' Vega-Lite charts: what each spec says, before a browser
draws it (``tests/reports/test_straggler_forecast`` draws the forecast in Chromium)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest

from faultlens.app.dashboard import vega_models as vm
from faultlens.reports.chart_style import PALETTE
from faultlens.reports.straggler_forecast import TOP_N
from tests.app.smallapp import small_app

MODEL_METRICS = ("pr_auc", "precision", "recall", "precision_at_k")
SCORERS = ["model", "rule_baseline", "lemon_baseline"]


def _tooltip(spec: dict) -> dict[str, dict]:
    return {t["field"]: t for t in spec["encoding"]["tooltip"]}


# -- predictions -----------------------------------------------------------------------------------
AT_RISK_NODES = [f"gpu{i:03d}" for i in range(20)]


def _at_risk() -> pl.DataFrame:
    """Twenty rows highest first (as ``q_fleet.latest_predictions``): GPU 3 on the first node,
    whole nodes after it (a null GPU, then an empty one)."""
    n = len(AT_RISK_NODES)
    return pl.DataFrame(
        {
            "node": AT_RISK_NODES,
            "gpu": ["3", None, "", *[None] * (n - 3)],
            "score": [round(0.95 - 0.04 * i, 2) for i in range(n)],
            "model_version": ["m1"] * n,
        }
    )


def test_at_risk_keeps_the_highest_fifteen_top_down() -> None:
    frame = _at_risk()
    data, spec = vm.at_risk(frame)
    assert data is not None and data.height == 15
    assert data["label"].to_list()[:3] == ["gpu000 gpu3", "gpu001", "gpu002"]
    assert data["label"].to_list()[-1] == AT_RISK_NODES[14]
    assert data["score"].to_list() == [round(0.95 - 0.04 * i, 2) for i in range(15)]
    enc = spec["encoding"]
    # the first row on top, from the rows' rank (a sort of None keeps, in the browser, the order
    # of the data first drawn when a filter change swaps the rows)
    assert data["rank"].to_list() == list(range(15))
    assert enc["y"]["field"] == "label" and enc["y"]["sort"] == {"field": "rank", "op": "min"}
    assert enc["x"]["field"] == "score" and enc["x"]["title"] == "failure probability"
    assert enc["x"]["scale"]["domain"] == [0, 1]
    assert spec["mark"]["color"] == PALETTE[1]
    assert spec["title"] == "Nodes / GPUs at risk now"
    assert _tooltip(spec)["score"]["format"] == ".2f"


CALIBRATION = {"predicted": [0.05, 0.42, 0.88], "observed": [0.02, 0.5, 0.75], "rows": [900, 40, 8]}


def test_calibration_draws_the_model_over_the_dashed_diagonal() -> None:
    data, spec = vm.calibration(pl.DataFrame({"bin_lo": [0.0, 0.4, 0.8], **CALIBRATION}))
    assert data is not None
    assert data.select("predicted", "observed", "rows").to_dict(as_series=False) == CALIBRATION
    assert set(data["series"]) == {"model"}
    perfect, model = spec["layer"]
    # the diagonal carries its own two points, (0, 0) and (1, 1)
    ends = [(v["predicted"], v["observed"]) for v in perfect["data"]["values"]]
    assert ends == [(0, 0), (1, 1)]
    assert {v["series"] for v in perfect["data"]["values"]} == {"perfect"}
    assert "data" not in model  # the chart's rows
    assert model["mark"]["point"]  # lines and markers
    for layer in (perfect, model):
        enc = layer["encoding"]
        assert (enc["x"]["field"], enc["x"]["title"]) == ("predicted", "predicted")
        assert (enc["y"]["field"], enc["y"]["title"]) == ("observed", "observed")
        assert enc["x"]["scale"]["domain"] == enc["y"]["scale"]["domain"] == [0, 1]
        # one legend: colour and dash of the same field, "perfect" grey and dashed
        assert enc["color"]["field"] == enc["strokeDash"]["field"] == "series"
        assert enc["color"]["scale"]["domain"] == ["perfect", "model"]
        assert enc["color"]["scale"]["range"] == ["#999", PALETTE[0]]
        dashed, solid = enc["strokeDash"]["scale"]["range"]
        assert len(dashed) == 2 and dashed[1] > 0 and solid[1] == 0
    assert "tooltip" not in perfect["encoding"]
    assert [t["field"] for t in model["encoding"]["tooltip"]] == ["predicted", "observed", "rows"]


BASELINES = {
    "scorer": SCORERS,
    "pr_auc": [0.6, 0.3, 0.2],
    "precision": [0.5, 0.35, None],
    "recall": [0.7, 0.2, 0.45],
    "precision_at_k": [0.4, 0.3, 0.15],
    "median_lead_time_h": [6.0, 2.0, None],
}


def test_model_vs_baselines_groups_the_four_metrics_per_scorer() -> None:
    metrics = list(MODEL_METRICS)
    data, spec = vm.model_vs_baselines(pl.DataFrame(BASELINES))
    assert data is not None and data.height == 3 * 4  # no lead time: not a 0..1 metric
    value = {(r["scorer"], r["metric"]): r["value"] for r in data.iter_rows(named=True)}
    for i, scorer in enumerate(BASELINES["scorer"]):
        for m in MODEL_METRICS:
            assert value[(scorer, m)] == BASELINES[m][i]
    enc = spec["encoding"]
    assert enc["x"]["field"] == "scorer" and enc["x"]["sort"] == BASELINES["scorer"]
    assert enc["xOffset"]["field"] == "metric" and enc["xOffset"]["sort"] == metrics
    assert enc["color"]["scale"]["domain"] == metrics
    assert enc["color"]["scale"]["range"] == list(PALETTE[:4])
    assert enc["y"]["scale"]["domain"] == [0, 1]
    assert [t["field"] for t in enc["tooltip"]] == ["scorer", "metric", "value"]


# -- stragglers ------------------------------------------------------------------------------------
STRAGGLERS = {
    "job_id": ["j1", "j1", "j2", "j3"],
    "node": ["n1", "n2", "n3", "n4"],
    "gpu": [2, None, 5, 0],
    "cause": ["thermal", "host", "thermal", "link"],
    "slowdown": [1.3, 1.1, 1.5, 1.05],
    "wasted_gpu_h": [4.0, 12.5, 6.0, 0.5],
}


def test_straggler_causes_sum_the_wasted_hours_most_first() -> None:
    data, spec = vm.straggler_causes(pl.DataFrame(STRAGGLERS))
    assert data is not None
    # host 12.5 h (1 straggler), thermal 4 + 6 h (2), link 0.5 h (1)
    assert data["cause"].to_list() == ["host", "thermal", "link"]
    assert data["wasted_gpu_h"].to_list() == [12.5, 10.0, 0.5]
    assert data["stragglers"].to_list() == [1, 2, 1]
    enc = spec["encoding"]
    assert data["rank"].to_list() == [0, 1, 2]
    assert enc["x"]["field"] == "cause" and enc["x"]["sort"] == {"field": "rank", "op": "min"}
    assert enc["y"]["title"] == "GPU-hours"
    assert spec["mark"]["color"] == PALETTE[1]
    assert set(_tooltip(spec)) == {"cause", "wasted_gpu_h", "stragglers"}


def test_straggler_slowdown_names_each_point_by_job_node_and_gpu() -> None:
    data, spec = vm.straggler_slowdown(pl.DataFrame(STRAGGLERS))
    assert data is not None
    # a node-level straggler (no GPU) is named by its node alone
    assert data["label"].to_list() == ["j1 n1 gpu2", "j1 n2", "j2 n3 gpu5", "j3 n4 gpu0"]
    assert data["slowdown"].to_list() == STRAGGLERS["slowdown"]
    assert data["wasted_gpu_h"].to_list() == STRAGGLERS["wasted_gpu_h"]
    enc = spec["encoding"]
    assert (enc["x"]["field"], enc["x"]["title"]) == ("slowdown", "slowdown (x)")
    assert enc["x"]["scale"]["zero"] is False  # slowdowns start at 1
    assert (enc["y"]["field"], enc["y"]["title"]) == ("wasted_gpu_h", "GPU-hours wasted")
    assert spec["mark"]["type"] == "point" and spec["mark"]["color"] == PALETTE[4]
    assert "label" in _tooltip(spec)


def _forecast(n: int) -> pl.DataFrame:
    """``n`` GPUs of job j7 on node n1, GPU i scored 0.5 + i / (2 n): the last is likeliest."""
    return pl.DataFrame(
        {
            "job_id": ["j7"] * n,
            "node": ["n1"] * n,
            "gpu": list(range(n)),
            "win_start": [datetime(2025, 2, 1, 10)] * n,
            "score": [0.5 + i / (2 * n) for i in range(n)],
        }
    )


def test_straggler_forecast_shows_the_likeliest_gpus_first() -> None:
    n = TOP_N + 5
    data, spec = vm.straggler_forecast(_forecast(n))
    assert data is not None and data.height == TOP_N
    gpus = list(range(n - 1, n - 1 - TOP_N, -1))  # the highest scores, highest first
    assert data["label"].to_list() == [f"j7 n1 gpu{g}" for g in gpus]
    assert data["score"].to_list() == [0.5 + g / (2 * n) for g in gpus]
    enc = spec["encoding"]
    assert data["rank"].to_list() == list(range(TOP_N))
    assert enc["x"]["field"] == "label" and enc["x"]["sort"] == {"field": "rank", "op": "min"}
    assert enc["y"]["title"] == "probability" and enc["y"]["scale"]["domain"] == [0, 1]
    assert spec["mark"]["color"] == PALETTE[2]
    assert spec["title"] == "Likely to straggle in the next window"
    assert _tooltip(spec)["score"]["format"] == ".2f"


def test_every_predictions_and_stragglers_chart_says_so_when_empty() -> None:
    empty = pl.DataFrame()
    for fn, what in (
        (vm.at_risk, "no predictions: run `faultlens predict`"),
        (vm.calibration, "no predictions in this range"),
        (vm.model_vs_baselines, "no model card: run `faultlens train`"),
        (vm.straggler_causes, "no stragglers in this range"),
        (vm.straggler_slowdown, "no stragglers in this range"),
        (vm.straggler_forecast, "no GPU above the threshold"),
    ):
        data, spec = fn(empty)
        assert data is None
        assert spec["data"]["values"] == [{"text": what}]
        assert spec["mark"]["type"] == "text"


def test_predictions_page_draws_vega_lite_not_plotly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "models" / "failure-test"  # the model smalldb's predictions name
    folder.mkdir(parents=True)
    metrics = {s: {m: BASELINES[m][i] for m in MODEL_METRICS} for i, s in enumerate(SCORERS)}
    card = {"model_version": "failure-test", "horizon_h": 24.0, "metrics": metrics}
    (folder / "model_card.json").write_text(json.dumps(card))
    app = small_app(tmp_path, monkeypatch)
    app.switch_page("views/predictions.py").run()
    assert not app.exception, [e.value for e in app.exception]
    specs = [json.loads(c.proto.spec) for c in app.get("vega_lite_chart")]
    assert [s["title"] for s in specs] == [
        "Nodes / GPUs at risk now",
        "Calibration: predicted vs observed failure rate",
        "Model vs baselines (test window)",
    ]
    assert specs[2]["encoding"]["x"]["sort"] == SCORERS  # the card's scorers, in its order
    assert app.get("plotly_chart") == []

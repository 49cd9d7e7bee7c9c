"""The straggler predictor end to end: report section, dashboard panel (AppTest and Chromium), on
a synthetic training cluster (seed never used to develop the detector or the predictor), its
forecast checked against the generator's ground truth by a matcher of this test's own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from streamlit.testing.v1 import AppTest

from faultlens.ingest.store import Store
from faultlens.ingest.telemetry.prom import PARSERS as PROM_PARSERS
from faultlens.ingest.training.parser import PARSERS as TRAINING_PARSERS
from faultlens.models import straggler_predict as sp
from faultlens.models import stragglers as ms
from faultlens.reports import straggler_forecast as sf
from faultlens.reports.filters import Filters
from faultlens.synth import training as st
from tests.app.test_dashboard_browser import (
    CHROMIUM,
    _free_port,
    _no_exception,
    _wait_http,
)
from tests.models.test_stragglers import START, ingest_file

SEED = 40127  # not used by any other test, nor to choose anything in the predictor
LAST_WINDOW = timedelta(minutes=10)
MAIN = str(Path(__file__).resolve().parents[2] / "app" / "dashboard" / "main.py")
FORECAST_TITLE = "Likely to straggle in the next window"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("forecast")
    rng = np.random.default_rng(SEED)
    jobs = st.standalone_jobs(rng, 12, START, n_nodes=24)
    truth = st.write(jobs, [], rng, out, {"extra": {"stragglers": {"max_jobs": 12}}})
    db = out / "db.duckdb"
    with Store(db) as store:
        store.insert("jobs", pl.DataFrame(jobs).with_columns(n_nodes=pl.col("nodes").list.len()))
        for folder in sorted((out / "jobs").iterdir()):
            ingest_file(store, PROM_PARSERS[0], folder / "telemetry.json")
            ingest_file(store, TRAINING_PARSERS[0], folder / "train.log")
    return {"db": db, "truth": truth, "jobs": jobs}


def _truth_hit(truth: list[dict], job_id: str, node: str, gpu: int | None) -> bool:
    """A forecast GPU is right when the generator made that GPU, or its whole node (``gpu``
    None: a host cause slows every GPU), a straggler of that job."""
    return any(
        t["job_id"] == job_id and t["node"] == node and t["gpu"] in (None, gpu) for t in truth
    )


def test_report_section_against_the_ground_truth(cluster) -> None:
    with Store(cluster["db"], read_only=True) as store:
        fc = sf.straggler_forecast(store, Filters())
        section = sf.section(store, Filters(), fc)
    one_node = fc.next["node"][0]
    narrowed = sf.narrowed(fc, (one_node,))
    assert fc.note is None and fc.next.height > 0
    assert (fc.next["score"] >= fc.threshold).all()
    hits = [
        _truth_hit(cluster["truth"], *r) for r in fc.next.select("job_id", "node", "gpu").rows()
    ]
    precision = sum(hits) / len(hits)
    assert precision >= 0.8, (precision, fc.next)
    # a straggler the generator kept up to its job's last window is forecast for the next one
    # (one that recovered before the job ended is not expected to be)
    ends = {j["job_id"]: j["end"] for j in cluster["jobs"]}
    open_at_end = {
        (t["job_id"], t["node"])
        for t in cluster["truth"]
        if datetime.fromisoformat(t["end"]) >= ends[t["job_id"]] - LAST_WINDOW
    }
    found = set(fc.next.select("job_id", "node").rows())
    assert open_at_end, cluster["truth"]
    assert len(open_at_end & found) >= 0.8 * len(open_at_end), (open_at_end, found)
    # the model beside the baseline, both measured on the same test split
    assert fc.metrics["scorer"].to_list() == ["model", "baseline"]
    assert fc.positives_test > 0
    # the section carries the same numbers, the chart and both tables
    assert section.anchor == "straggler-forecast" and section.note is None
    assert (
        "GPUs likely to straggle next",
        f"{fc.next.height:,} of {fc.scored:,}",
    ) in section.numbers
    assert section.figures[0].data[0].y == tuple(fc.next["score"].head(sf.TOP_N).to_list())
    assert section.tables[1][1].equals(fc.next.head(sf.TOP_N))
    assert set(narrowed.next["node"].to_list()) == {one_node}


def test_section_without_telemetry_says_why(tmp_path) -> None:
    with Store(tmp_path / "empty.duckdb") as store:
        section = sf.section(store, Filters())
    assert section.note is not None and "telemetry" in section.note
    assert section.figures == [] and section.tables == []


def test_report_holds_the_forecast_section(cluster, tmp_path) -> None:
    out = tmp_path / "r.html"
    done = subprocess.run(
        [sys.executable, "-m", "faultlens.app.cli", "report", "--db", str(cluster["db"])]
        + ["--since", "3650d", "--out", str(out), "--models-dir", str(tmp_path / "m")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    html = out.read_text()
    assert '<section id="straggler-forecast">' in html
    assert "Likely to straggle in the next window" in html


def _expected_next(db: Path) -> pl.DataFrame:
    """The forecast straight from the model package (not through ``reports``)."""
    with Store(db, read_only=True) as store:
        windows = ms.detect(store).windows
    return sp.forecast(windows)["next"]


def test_dashboard_panel_under_apptest(cluster, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("FAULTLENS_DB", str(cluster["db"]))
    monkeypatch.setenv("FAULTLENS_MODELS_DIR", str(tmp_path / "models"))
    at = AppTest.from_file(MAIN, default_timeout=180)
    at.run()
    at.switch_page("views/stragglers.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert "Next window: straggler predictor" in [s.value for s in at.subheader]
    expected = _expected_next(cluster["db"]).head(sf.TOP_N)
    shown = at.dataframe[-1].value  # the page's last table: the forecast's GPUs
    assert at.dataframe[-2].value["scorer"].tolist() == ["model", "baseline"]
    assert shown["node"].tolist() == expected["node"].to_list()
    assert shown["gpu"].tolist() == expected["gpu"].to_list()
    labels = {m.label: m.value for m in at.metric}
    assert labels["GPUs likely to straggle next"].startswith(f"{expected.height:,} of ")
    # the page's charts are Vega-Lite (the browser never loads plotly.js for the dashboard)
    specs = [json.loads(c.proto.spec) for c in at.get("vega_lite_chart")]
    assert [s["title"] for s in specs] == [
        "GPU-hours wasted by straggler cause",
        "Slowdown vs GPU-hours wasted",
        FORECAST_TITLE,
    ]
    assert at.get("plotly_chart") == []


@pytest.fixture
def dashboard(cluster, tmp_path) -> Iterator[str]:
    if not Path(CHROMIUM).exists():
        pytest.fail("chromium missing: apt-get install chromium (.ci/apt-packages.txt)")
    port = _free_port()
    db = cluster["db"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "faultlens.app.cli", "dashboard", "--db", str(db)]
        + ["--port", str(port), "--models-dir", str(tmp_path / "models")],
        env=dict(os.environ, FAULTLENS_DB=str(db)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_http(url, proc)
        yield url
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)


def _wait_idle(page, timeout_ms: int = 300_000) -> None:  # noqa: ANN001
    """Until Streamlit finished the run: detection and two predictor fits take a while on a
    loaded machine (the dashboard's own pages wait 60 s)."""
    page.wait_for_selector("[data-testid='stMain']", timeout=timeout_ms)
    page.wait_for_function(
        "() => document.querySelector('[data-testid=\"stApp\"]')"
        "?.getAttribute('data-test-script-state') === 'notRunning'"
        " && !document.querySelector('[data-testid=\"stSkeleton\"]')",
        timeout=timeout_ms,
    )


@pytest.mark.integration
def test_dashboard_panel_in_chromium(dashboard, cluster, tmp_path) -> None:
    from playwright.sync_api import sync_playwright

    from tests.app.test_dashboard_browser import ARGS

    expected = _expected_next(cluster["db"])
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 2400})
            page.goto(f"{dashboard}/stragglers", timeout=120_000)
            _wait_idle(page)
            page.get_by_text("Next window: straggler predictor").wait_for(timeout=300_000)
            _wait_idle(page)
            _no_exception(page)
            # the chart drew its bars (Vega-Lite's SVG) under the forecast's title, one a GPU
            chart = page.locator(
                "[data-testid='stVegaLiteChart']",
                has=page.locator("svg.marks .role-title-text", has_text=FORECAST_TITLE),
            )
            chart.locator(".role-mark.mark-rect path").first.wait_for(timeout=60_000)
            bars = chart.locator(".role-mark.mark-rect path").count()
            assert bars == min(expected.height, sf.TOP_N), bars
            assert page.locator(".js-plotly-plot").count() == 0
            metric = page.locator("[data-testid='stMetric']", has_text="likely to straggle")
            assert metric.inner_text().split("\n")[-1].startswith(f"{expected.height:,} of ")
            page.screenshot(path=str(tmp_path / "stragglers.png"), full_page=True)
        finally:
            browser.close()

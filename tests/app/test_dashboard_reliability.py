"""The Reliability page and report section on a hand-made incident dataset, and on the site."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from streamlit.testing.v1 import AppTest

from faultlens.ingest.base import ParseContext
from faultlens.ingest.pipeline import ingest_paths
from faultlens.ingest.store import Store
from faultlens.reports.filters import Filters
from faultlens.reports.sections import reliability as reliability_section

MAIN = str(Path(__file__).resolve().parents[2] / "app" / "dashboard" / "main.py")
T0 = datetime(2024, 1, 1)
NODES, DAYS = 10, 50
# (node, day, repair h, level)
RECORDS = [
    (1, 2, 3.0, "Hardware"),
    (1, 9, 1.0, "Hardware"),
    (4, 20, 12.0, "Software"),
    (1, 30, 2.0, "Hardware"),
    (7, DAYS, 5.0, "Network"),
]


def _db(tmp_path: Path) -> Path:
    rows = ["system,nodes,nodenum,start,end,level"]
    for node, day, rep, level in RECORDS:
        at = T0 + timedelta(days=day)
        rows.append(
            f"5,{NODES},{node},{at.isoformat()},{(at + timedelta(hours=rep)).isoformat()},{level}"
        )
    path = tmp_path / "tickets.csv"
    path.write_text("\n".join(rows) + "\n")
    db = tmp_path / "r.duckdb"
    with Store(db) as store:
        ctx = ParseContext(file="", options={"dataset": "ops"})
        ingest_paths(store, [str(path)], now=T0, base_ctx=ctx)
    return db


def _rows(chart: Any) -> list[dict[str, Any]]:
    """The rows a Vega-Lite chart element carries."""
    return pa.ipc.open_stream(chart.proto.data.data).read_all().to_pylist()


def test_the_page_shows_the_datasets_rate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = _db(tmp_path)
    monkeypatch.setenv("FAULTLENS_DB", str(db))
    monkeypatch.setenv("FAULTLENS_MODELS_DIR", str(tmp_path / "models"))
    at = AppTest.from_file(MAIN, default_timeout=120)
    at.run()
    at.switch_page("views/reliability.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.info  # the site's own dataset has no failures: it says so
    at.selectbox("rel_dataset").set_value("ops").run()
    assert not at.exception, [e.value for e in at.exception]
    metrics = {m.label: m.value for m in at.metric}
    node_days = NODES * (DAYS - 2 + 5 / 24)  # first record to the last one's end, 1 s more
    want = len(RECORDS) * 1000 / node_days
    assert metrics["Failures / 1000 node-days"] == f"{want:.2f}"
    assert metrics["Failures"] == str(len(RECORDS))
    assert metrics["Worst 1.5% of nodes"] == f"{3 / 5:.1%}"
    # the charts are Vega-Lite (the page never loads plotly.js), in the report's order
    charts = at.get("vega_lite_chart")
    specs = [json.loads(c.proto.spec) for c in charts]
    assert [s["title"] for s in specs] == [
        "Failures by category (count; MTBF per node in the hover)",
        "Repair time (hours, log scale)",
        "Time between failures per node: empirical vs Weibull vs exponential",
        "Failures per node, worst first (cumulative share)",
        "Kaplan-Meier survival of units (by batch)",
    ]
    assert at.get("plotly_chart") == []
    # node 1's three failures leave two gaps (no fit), and the records hold no unit lifetimes
    # (Streamlit sends a spec's own rows as Arrow, as any chart's data)
    assert _rows(charts[2]) == [{"text": "fewer than 3 repeat failures of a node"}]
    assert _rows(charts[4]) == [{"text": "no unit lifetimes in this dataset"}]
    assert sum(r["failures"] for r in _rows(charts[1])) == len(RECORDS)  # every repair time


def test_the_report_section_has_the_plots(tmp_path: Path) -> None:
    db = _db(tmp_path)
    with Store(db, read_only=True) as store:
        section = reliability_section(store, Filters())
    # the report covers the site's own history: the public dataset stays out of it
    assert dict(section.numbers)["Failures"] == "0"
    assert len(section.figures) == 5
    from faultlens.reports.sections import build_sections

    with Store(db, read_only=True) as store:
        titles = {s.title: s for s in build_sections(store, Filters())}
    ops = titles["Reliability: dataset ops"]
    assert dict(ops.numbers)["Failures"] == str(len(RECORDS))

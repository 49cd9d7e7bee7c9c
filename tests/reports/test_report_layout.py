"""What makes a report forwardable: the PDF's first page, printed charts and headers, labels."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from faultlens.ingest.catalog import load_catalog
from faultlens.reports import build_report, chart_style, figures
from faultlens.reports.render import find_chromium
from tests.reports import smalldb


def _report(db: Path, out: Path, fmt: str) -> Path:
    return build_report(
        db,
        out,
        since=timedelta(days=30),
        now=datetime(2025, 4, 1),
        fmt=fmt,
        models_dir=out.parent / "models",
        workdir=out.parent / "snap",
    )


def test_html_charts_have_no_toolbar_and_the_data_stamp(tmp_path: Path) -> None:
    db = smalldb.build(tmp_path / "small.duckdb")
    html = _report(db, tmp_path / "r.html", "html").read_text()
    configs = re.findall(r'"displayModeBar":\s*(true|false)', html)
    assert configs and set(configs) == {"false"}
    newest = smalldb.START + timedelta(days=6, hours=1)  # the last dcgm diag line
    assert f"data as of {newest:%Y-%m-%d %H:%M} UTC" in html


@pytest.mark.integration
def test_pdf_starts_with_the_summary_and_prints_whole_headers(tmp_path: Path) -> None:
    from pypdf import PdfReader

    if find_chromium() is None:
        pytest.fail("chromium missing: apt-get install chromium")
    db = smalldb.build(tmp_path / "small.duckdb")
    pages = PdfReader(_report(db, tmp_path / "r.pdf", "pdf")).pages
    first = pages[0].extract_text()
    assert "Failures / 1000 node-days" in first and "Jobs lost" in first
    assert "Nodes by state" in first
    text = "\n".join(p.extract_text() for p in pages)
    # table headers in one piece, not one letter a line
    for header in ("first_seen", "last_seen", "gpu_hours_lost", "interruptions"):
        assert header in text, header
    assert "Produced with Plotly" not in text  # no mode bar printed


def test_xid_labels_keep_the_distinguishing_words_within_the_margin() -> None:
    names = dict(zip(*load_catalog().select("xid", "name"), strict=True))
    for xid, name in names.items():
        label = figures.xid_label(xid, name)
        assert label.startswith(f"Xid {xid}")
        assert len(label) <= chart_style.XID_LABEL_CHARS
        assert "ROBUST_CHANNEL_" not in label
    assert figures.xid_label(79, names[79]).startswith("Xid 79 GPU_HAS_FALLEN")


def test_a_single_telemetry_sample_is_a_visible_point_on_a_readable_axis() -> None:
    ts = datetime(2025, 3, 1, 12)
    frame = pl.DataFrame({"ts": [ts, ts], "gpu": [0, 1], "value": [40.0, 41.0]})
    fig = figures.fig_telemetry(frame, "DCGM_FI_DEV_GPU_TEMP")
    assert all("markers" in t.mode for t in fig.data)
    lo, hi = fig.layout.xaxis.range
    assert (hi - lo) >= 2 * figures.MIN_TIME_SPAN  # not a sub-millisecond axis
    assert fig.layout.yaxis.title.text == "gpu_temp"


def test_a_legend_of_many_entries_is_beside_the_plot() -> None:
    frame = pl.DataFrame(
        {
            "strategy": ["checkpoint", "elastic"],
            **{f"badput_{b}": [1.0, 2.0] for b in ("lost", "restart", "ckpt", "wait", "x")},
            "spare_idle": [0.0, 1.0],
        }
    )
    fig = figures.fig_badput(frame)
    assert fig.layout.legend.orientation == "v" and fig.layout.legend.x >= 1.0
    assert fig.layout.margin.r >= figures.LEGEND_PX


def test_fleet_grid_puts_groups_needing_a_look_first_each_on_its_own_rows() -> None:
    columns = 2
    frame = pl.DataFrame(
        {
            "group": ["b", "a", "a", "a", "c"],
            "node": ["b1", "a1", "a2", "a3", "c1"],
            "state": ["healthy", "healthy", "healthy", "down", "degraded"],
            "reason": [""] * 5,
            "gpus": [""] * 5,
            "score": [None] * 5,
        }
    )
    cells = chart_style.grid_positions(frame, columns)
    where = {n: (r, c) for n, r, c in zip(cells["node"], cells["row"], cells["col"], strict=True)}
    # a (has a down node): rows 0-1; c (degraded): row 2; b (healthy): row 3
    assert where == {"a1": (0, 0), "a2": (0, 1), "a3": (1, 0), "c1": (2, 0), "b1": (3, 0)}
    # (its squares, legend and hover: tests/app/test_dashboard_vega.py)

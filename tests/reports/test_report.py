"""Report sections, figures, escaping and the HTML / PDF writers, on the small database."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import plotly.graph_objects as go
import polars as pl
import pytest
from typer.testing import CliRunner

from faultlens.app.cli import app as cli
from faultlens.ingest.errors import ConfigError
from faultlens.reports import build_report, figures, parse_since, q_fleet
from faultlens.reports.filters import Filters, bucket_for, cluster_of, nodes_for
from faultlens.reports.render import find_chromium
from tests.reports import smalldb

WEEK = Filters(since=smalldb.START, until=smalldb.END)


@pytest.fixture
def small(tmp_path: Path):
    from faultlens.ingest.store import Store

    path = smalldb.build(tmp_path / "small.duckdb")
    with Store(path, read_only=True) as store:
        yield store


def test_cluster_is_the_node_name_without_its_number() -> None:
    assert cluster_of("gpu017") == "gpu"
    assert cluster_of("dgx-b-04") == "dgx-b"
    assert cluster_of("login") == "login"
    assert nodes_for(smalldb.NODES, ["dgx-b"], []) == ("dgx-b-01", "dgx-b-02")
    assert nodes_for(smalldb.NODES, ["dgx-b"], ["gpu001"]) == ("gpu001",)


def test_parse_since() -> None:
    assert parse_since("7d") == timedelta(days=7)
    assert parse_since("36h") == timedelta(hours=36)
    assert parse_since("2025-03-01") == datetime(2025, 3, 1)
    with pytest.raises(ConfigError):
        parse_since("last tuesday")


def test_bucket_for_ranges() -> None:
    assert bucket_for(smalldb.START, smalldb.START + timedelta(days=2))[0] == "1 hour"
    assert bucket_for(smalldb.START, smalldb.END)[0] == "6 hours"
    assert bucket_for(smalldb.START, smalldb.START + timedelta(days=60))[0] == "1 day"


def test_overview_queries(small) -> None:  # noqa: ANN001
    episodes = q_fleet.failures(small, WEEK)
    assert episodes.height == smalldb.FAILURES
    assert sorted(episodes["cause"].to_list()) == ["xid48", "xid79", "xid95"]
    mtbf = q_fleet.mtbf_by_component(episodes, WEEK.node_days(len(smalldb.NODES)))
    node_h = len(smalldb.NODES) * 7 * 24
    assert dict(zip(mtbf["component"], mtbf["mtbf_node_h"], strict=True)) == {
        "GPU memory": node_h / 2,
        "GPU": node_h / 1,
    }
    assert q_fleet.jobs_lost(small, WEEK)["failed_jobs"] == 2
    xids = q_fleet.top_xids(small, WEEK)
    assert xids["xid"].to_list()[0] == 13 and xids["events"].to_list()[0] == 3
    risk = q_fleet.latest_predictions(small, WEEK)
    assert risk["node"][0] == smalldb.RISKY_NODE and risk["score"][0] == smalldb.RISKY_SCORE


def test_event_explorer_filters_and_pages(small) -> None:  # noqa: ANN001
    assert q_fleet.event_count(small, WEEK, {"code": [79, 48]}) == 2
    assert q_fleet.event_count(small, WEEK, None, "script") == 1
    dgx = Filters(since=smalldb.START, until=smalldb.END, nodes=("dgx-b-01",))
    assert q_fleet.event_count(small, dgx, {"severity": ["critical"]}) == 1
    page = q_fleet.event_page(small, WEEK, {"kind": ["xid"]}, offset=1, limit=2)
    assert page.height == 2
    assert page["ts"].to_list() == sorted(page["ts"].to_list(), reverse=True)
    timeline = q_fleet.event_timeline(small, WEEK, by="kind")
    assert int(timeline.filter(pl.col("kind") == "xid")["events"].sum()) == 6


@pytest.mark.parametrize("name", [n for n in dir(figures) if n.startswith("fig_")])
def test_every_figure_accepts_an_empty_frame(name: str) -> None:
    fig = getattr(figures, name)(pl.DataFrame())
    assert isinstance(fig, go.Figure)
    assert fig.layout.annotations  # says there is nothing to show


def _report(small_path: Path, out: Path, fmt: str = "html") -> Path:
    return build_report(
        small_path,
        out,
        since=timedelta(days=30),
        now=datetime(2025, 4, 1),
        fmt=fmt,
        models_dir=out.parent / "models",
        workdir=out.parent / "snap",
    )


def test_html_report_is_self_contained_and_escaped(tmp_path: Path) -> None:
    db = smalldb.build(tmp_path / "small.duckdb")
    html = _report(db, tmp_path / "r.html").read_text()
    assert html.count('<script type="text/javascript">') == 1  # plotly.js inlined once
    assert 'src="http' not in html and "cdn.plot.ly/plotly" not in html
    assert "<script>alert" not in html  # the log line stays text
    assert "NVRM: &lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in html
    assert "NVRM: Xid &lt;b&gt;garbled" in html  # quarantined raw line, escaped
    for anchor in (
        "overview",
        "events",
        "nodes",
        "jobs",
        "predictions",
        "stragglers",
        "recovery",
        "data-health",
    ):
        assert f'<section id="{anchor}">' in html
    assert "Jobs lost" in html and "2 of 3" in html


def test_report_command_writes_the_path_on_stdout(tmp_path: Path) -> None:
    db = smalldb.build(tmp_path / "small.duckdb")
    out = tmp_path / "weekly.html"
    result = CliRunner().invoke(
        cli, ["report", "--db", str(db), "--since", "7d", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str(out)
    assert out.stat().st_size > 1_000_000  # plotly.js is inside


def test_report_without_database_exits_no_data(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["report", "--db", str(tmp_path / "absent.duckdb")])
    assert result.exit_code == 5


@pytest.mark.integration
def test_pdf_report(tmp_path: Path) -> None:
    if find_chromium() is None:
        pytest.fail("chromium missing: apt-get install chromium")
    db = smalldb.build(tmp_path / "small.duckdb")
    pdf = _report(db, tmp_path / "r.pdf", fmt="pdf")
    assert pdf.read_bytes()[:5] == b"%PDF-"


def test_telemetry_line_stops_where_the_telemetry_stops() -> None:
    hours = (0, 1, 2, 3, 20, 21)  # nothing between 03:00 and 20:00
    frame = pl.DataFrame(
        {
            "ts": [smalldb.START + timedelta(hours=h) for h in hours],
            "gpu": [0] * len(hours),
            "value": [60.0, 61, 62, 63, 70, 71],
        }
    )
    trace = figures.fig_telemetry(frame, "DCGM_FI_DEV_GPU_TEMP").data[0]
    assert len(trace.y) == len(hours) + 1
    assert [v == v for v in trace.y] == [True] * 4 + [False] + [True] * 2  # NaN breaks the line
    assert trace.x[4] == smalldb.START + timedelta(hours=4)


def test_report_retries_a_database_that_changes_while_it_is_copied(tmp_path, monkeypatch) -> None:
    from faultlens.ingest.errors import StoreError
    from faultlens.reports import build
    from faultlens.reports.snapshot import SnapshotReader

    db = tmp_path / "f.duckdb"
    from faultlens.ingest.store import Store

    with Store(db):
        pass
    calls = []
    real = SnapshotReader.refresh

    def flaky(self):  # the first two copies see a writer change the file under them
        calls.append(1)
        return None if len(calls) <= 2 else real(self)

    monkeypatch.setattr(SnapshotReader, "refresh", flaky)
    reader = SnapshotReader(db, tmp_path / "work", with_rollups=False)
    snap = build.first_snapshot(reader, db, attempts=5, pause_s=0.0)
    assert len(calls) == 3 and snap.path.exists()
    monkeypatch.setattr(SnapshotReader, "refresh", lambda self: None)
    with pytest.raises(StoreError, match="consistent copy"):
        build.first_snapshot(reader, db, attempts=2, pause_s=0.0)
    with pytest.raises(StoreError, match="no database"):
        build.first_snapshot(reader, tmp_path / "missing.duckdb", attempts=2, pause_s=0.0)


def test_predictions_section_names_the_threshold_and_its_floor(small, tmp_path: Path) -> None:  # noqa: ANN001
    import json

    from faultlens.reports import sections

    risk = q_fleet.latest_predictions(small, WEEK)
    version = risk["model_version"][0]
    card = {
        "model_version": version,
        "horizon_h": 24.0,
        "thresholds": {"drain_after_jobs": 0.2577, "watch": 0.12885, "drain_now": 0.9},
        "calibration": {
            "floor": {
                "floor": 0.2577,
                "seen_share": 0.3153,
                "seen_level": 0.1,
                "failure_episodes": 111,
            }
        },
        "metrics": {},
    }
    (tmp_path / "models" / version).mkdir(parents=True)
    (tmp_path / "models" / version / "model_card.json").write_text(json.dumps(card))
    numbers = dict(sections.predictions(small, WEEK, tmp_path / "models").numbers)
    assert numbers["Model"] == version
    assert numbers["Alert threshold"] == "0.258 (floor 0.258)"
    # a card from before the floor was recorded: no threshold line rather than a guessed one
    del card["calibration"]
    (tmp_path / "models" / version / "model_card.json").write_text(json.dumps(card))
    assert "Alert threshold" not in dict(
        sections.predictions(small, WEEK, tmp_path / "models").numbers
    )

"""The dashboard under AppTest: every page on a small database, filters, empty states."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from tests.reports import smalldb

MAIN = str(Path(__file__).resolve().parents[2] / "app" / "dashboard" / "main.py")
PAGES = ("overview", "events", "node", "jobs", "predictions", "stragglers", "recovery",
         "data_health")


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    db = smalldb.build(tmp_path / "small.duckdb")
    monkeypatch.setenv("FAULTLENS_DB", str(db))
    monkeypatch.setenv("FAULTLENS_MODELS_DIR", str(tmp_path / "models"))
    at = AppTest.from_file(MAIN, default_timeout=120)
    at.run()
    # the last day of data is END - 1 day; the range covers whole days: exactly the 7 days
    last_day = (smalldb.END - timedelta(days=1)).date()
    at.sidebar.date_input("f_range").set_value((smalldb.START.date(), last_day)).run()
    return at


def _metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def test_every_page_renders_without_exception(app: AppTest) -> None:
    for page in PAGES:
        app.switch_page(f"views/{page}.py").run()
        assert not app.exception, (page, [e.value for e in app.exception])
        assert app.title, page


def test_overview_numbers(app: AppTest) -> None:
    node_days = len(smalldb.NODES) * 7
    m = _metrics(app)
    assert m["Failures / 1000 node-days"] == f"{smalldb.FAILURES * 1000 / node_days:.2f}"
    assert m["Jobs lost"] == "2"
    assert m["Nodes at risk now"] == "1"


def test_cluster_filter_narrows_overview(app: AppTest) -> None:
    app.multiselect(key="f_cluster").set_value(["dgx-b"]).run()
    m = _metrics(app)
    # one failure (dgx-b-01, Xid 95) on 2 nodes x 7 days; job 103 failed there
    assert m["Failures / 1000 node-days"] == f"{1 * 1000 / (2 * 7):.2f}"
    assert m["Jobs lost"] == "1"
    assert m["Nodes at risk now"] == "0"


def test_events_search_and_raw_line(app: AppTest) -> None:
    app.switch_page("views/events.py").run()
    app.text_input("ev_search").set_value("script").run()
    assert not app.exception
    assert any(s.value == "1 events" for s in app.subheader)
    table = app.dataframe[0].value
    assert table["message"].iloc[0] == smalldb.SCRIPT_LINE


def test_node_page_shows_risk_and_lemon(app: AppTest) -> None:
    app.switch_page("views/node.py").run()
    app.selectbox("node_pick").set_value(smalldb.RISKY_NODE).run()
    m = _metrics(app)
    assert m["Risk score"] == f"{smalldb.RISKY_SCORE:.2f}"
    assert m["Lemon"] == "yes"
    assert not app.exception


def test_predictions_without_model_says_what_to_run(app: AppTest) -> None:
    app.switch_page("views/predictions.py").run()
    assert any("faultlens train" in i.value for i in app.info)


def test_recovery_what_if_ranks_strategies(app: AppTest) -> None:
    app.switch_page("views/recovery.py").run()
    app.slider("rw_interval").set_value(60).run()
    assert not app.exception
    table = app.dataframe[0].value
    assert set(table["strategy"]) == {"checkpoint", "young-daly", "in-memory", "hot-spares",
                                      "elastic"}
    assert (table["interval_min"][table["strategy"] == "checkpoint"] == 60.0).all()
    assert list(table["cost_usd"]) == sorted(table["cost_usd"])


def test_data_health_numbers(app: AppTest) -> None:
    app.switch_page("views/data_health.py").run()
    m = _metrics(app)
    assert m["Quarantined"] == str(smalldb.QUARANTINED)
    assert m["Files"] == "2"


def test_missing_database_says_what_to_run(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAULTLENS_DB", str(tmp_path / "absent.duckdb"))
    at = AppTest.from_file(MAIN, default_timeout=60)
    at.run()
    assert not at.exception
    assert any("faultlens demo" in i.value for i in at.info)


def test_empty_database_pages_do_not_fail(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from ingest.store import Store

    Store(tmp_path / "empty.duckdb").close()
    monkeypatch.setenv("FAULTLENS_DB", str(tmp_path / "empty.duckdb"))
    at = AppTest.from_file(MAIN, default_timeout=60)
    at.run()
    for page in PAGES:
        at.switch_page(f"views/{page}.py").run()
        assert not at.exception, (page, [e.value for e in at.exception])

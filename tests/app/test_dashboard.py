"""The dashboard under AppTest: every page on a small database, filters, empty states."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from tests.app.smallapp import MAIN, small_app
from tests.reports import smalldb

PAGES = (
    "overview",
    "events",
    "node",
    "jobs",
    "predictions",
    "stragglers",
    "recovery",
    "data_health",
)


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    return small_app(tmp_path, monkeypatch)


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


def test_node_page_keeps_the_telemetry_chart_for_a_node_without_telemetry(app: AppTest) -> None:
    """gpu002 has GPU temperatures, gpu001 none: the chart stays (the same chart, no lines) and
    the metric picker is disabled, so a change between them swaps the data in the browser."""
    app.switch_page("views/node.py").run()
    app.selectbox("node_pick").set_value("gpu002").run()
    assert app.selectbox("node_m").value == "DCGM_FI_DEV_GPU_TEMP"
    assert not app.selectbox("node_m").disabled
    charts = [c.proto.spec for c in app.get("vega_lite_chart")]
    assert len(charts) == 2  # the events chart and the telemetry chart
    app.selectbox("node_pick").set_value("gpu001").run()
    assert not app.exception
    assert app.selectbox("node_m").disabled and app.selectbox("node_m").value is None
    assert "No telemetry for this node." in [c.value for c in app.caption]
    assert [c.proto.spec for c in app.get("vega_lite_chart")] == charts  # same specs


def test_predictions_without_model_says_what_to_run(app: AppTest) -> None:
    app.switch_page("views/predictions.py").run()
    assert any("faultlens train" in i.value for i in app.info)


def test_predictions_say_the_threshold_and_why_its_floor(app: AppTest, tmp_path: Path) -> None:
    card = {
        "model_version": "failure-test",  # the model smalldb's predictions name
        "horizon_h": 24.0,
        "thresholds": {"drain_after_jobs": 0.25, "watch": 0.125, "drain_now": 0.9},
        "calibration": {
            "floor": {"floor": 0.25, "seen_share": 0.28, "seen_level": 0.1, "failure_episodes": 96}
        },
        "metrics": {},
    }
    folder = tmp_path / "models" / "failure-test"
    folder.mkdir(parents=True)
    (folder / "model_card.json").write_text(json.dumps(card))
    app.switch_page("views/predictions.py").run()
    assert not app.exception
    captions = [c.value for c in app.caption]
    assert (
        "Operating threshold 0.250: floor 0.250, the out-of-fold scores saw 28% of the 96 "
        "failures of the fitting window coming (above 0.1 in the 24 h before)." in captions
    ), captions


def test_recovery_what_if_ranks_strategies(app: AppTest) -> None:
    app.switch_page("views/recovery.py").run()
    app.slider("rw_interval").set_value(60).run()
    assert not app.exception
    table = app.dataframe[0].value
    assert set(table["strategy"]) == {
        "checkpoint",
        "young-daly",
        "in-memory",
        "hot-spares",
        "elastic",
    }
    assert (table["interval_min"][table["strategy"] == "checkpoint"] == 60.0).all()
    assert list(table["cost_usd"]) == sorted(table["cost_usd"])


def test_data_health_numbers(app: AppTest) -> None:
    app.switch_page("views/data_health.py").run()
    m = _metrics(app)
    assert m["Quarantined"] == str(smalldb.QUARANTINED)
    assert m["Files"] == "2"


def test_missing_database_says_what_to_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAULTLENS_DB", str(tmp_path / "absent.duckdb"))
    at = AppTest.from_file(MAIN, default_timeout=60)
    at.run()
    assert not at.exception
    assert any("faultlens demo" in i.value for i in at.info)


def test_empty_database_pages_do_not_fail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from faultlens.ingest.store import Store

    Store(tmp_path / "empty.duckdb").close()
    monkeypatch.setenv("FAULTLENS_DB", str(tmp_path / "empty.duckdb"))
    at = AppTest.from_file(MAIN, default_timeout=60)
    at.run()
    for page in PAGES:
        at.switch_page(f"views/{page}.py").run()
        assert not at.exception, (page, [e.value for e in at.exception])


@pytest.fixture
def logs_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[AppTest, Path]:
    """The small database whose gpu003 Xid 13 events point at a log file under the configured
    folder, and whose first quarantined line points at a file outside it."""
    from faultlens.ingest.store import Store
    from faultlens.reports.source_context import ROOTS_ENV

    logs, secret = tmp_path / "logs", tmp_path / "secret"
    logs.mkdir()
    secret.mkdir()
    kern = logs / "kern.log"
    kern.write_text(
        "".join(
            f"kernel line {i}\n" if i != 50 else f"{smalldb.SCRIPT_LINE}\n" for i in range(1, 61)
        )
    )
    (secret / "shadow").write_text("SECRET-CONTENT\n" * 10)
    db = smalldb.build(tmp_path / "small.duckdb")
    with Store(db) as store:
        store.execute(
            "UPDATE events SET file = ? WHERE node = 'gpu003' AND kind = 'xid'", [str(kern)]
        )
        store.execute("UPDATE quarantine SET file = ? WHERE line = 7", [str(secret / "shadow")])
    monkeypatch.setenv("FAULTLENS_DB", str(db))
    monkeypatch.setenv("FAULTLENS_MODELS_DIR", str(tmp_path / "models"))
    monkeypatch.setenv(ROOTS_ENV, json.dumps([str(logs.resolve())]))
    at = AppTest.from_file(MAIN, default_timeout=120)
    at.run()
    last_day = (smalldb.END - timedelta(days=1)).date()
    at.sidebar.date_input("f_range").set_value((smalldb.START.date(), last_day)).run()
    return at, kern


def _select_row(at: AppTest, key: str, row: int) -> None:
    at.session_state[key] = {"selection": {"rows": [row], "columns": [], "cells": []}}
    at.run()


def test_event_source_context_from_a_configured_folder(logs_app: tuple[AppTest, Path]) -> None:
    at, kern = logs_app
    at.switch_page("views/events.py").run()
    at.text_input("ev_search").set_value("script").run()
    _select_row(at, "ev_table", 0)
    assert not at.exception
    codes = [c.value for c in at.code]
    assert f"{kern}:50" in codes
    context = codes[-1].splitlines()
    assert context[0] == f" {45:>8} | kernel line 45"
    assert context[5] == f">{50:>8} | {smalldb.SCRIPT_LINE}"  # the line itself, as text
    assert context[-1] == f" {55:>8} | kernel line 55"
    assert not at.info


def test_quarantine_source_context_outside_the_folders_is_refused(
    logs_app: tuple[AppTest, Path],
) -> None:
    from faultlens.reports.source_context import OUTSIDE_MESSAGE

    at, _ = logs_app
    at.switch_page("views/data_health.py").run()
    table = at.dataframe[-1].value
    row = int(table.index[table["line"] == 7][0])
    _select_row(at, "q_table", row)
    assert not at.exception
    assert [i.value for i in at.info] == [OUTSIDE_MESSAGE]
    assert not any("SECRET" in c.value for c in at.code)


def test_source_context_without_folders_says_how_to_configure(app: AppTest) -> None:
    from faultlens.reports.source_context import NO_ROOTS_MESSAGE

    app.switch_page("views/events.py").run()
    _select_row(app, "ev_table", 0)
    assert [i.value for i in app.info] == [NO_ROOTS_MESSAGE]


def test_dashboard_command_hands_resolved_log_folders_to_the_app(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--logs` (repeatable) and the `[ingest]` paths of `--config` become the readable roots;
    the config's database is used when `--db` is not given."""
    from typer.testing import CliRunner

    from faultlens.app import cmd_report
    from faultlens.app.cli import app as cli
    from faultlens.reports.source_context import ROOTS_ENV

    (tmp_path / "a").mkdir()
    (tmp_path / "nodes").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "a", target_is_directory=True)
    cfg = tmp_path / "faultlens.toml"
    cfg.write_text('[faultlens]\ndb = "cfg.duckdb"\n[ingest]\npaths = ["nodes/*/kern.log"]\n')
    seen: dict[str, str] = {}

    def call(cmd: list[str], env: dict[str, str]) -> int:
        seen.update(env)
        return 0

    monkeypatch.setattr(cmd_report, "run_server", call)
    result = CliRunner().invoke(
        cli, ["dashboard", "--logs", str(tmp_path / "link"), "--config", str(cfg)]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(seen[ROOTS_ENV]) == [
        str((tmp_path / "a").resolve()),
        str((tmp_path / "nodes").resolve()),
    ]
    assert seen["FAULTLENS_DB"] == str((tmp_path / "cfg.duckdb").resolve())
    result = CliRunner().invoke(cli, ["dashboard", "--db", str(tmp_path / "x.duckdb")])
    assert json.loads(seen[ROOTS_ENV]) == []
    assert "no log folders configured" in result.output

"""The on-call screens under AppTest: fleet state first, evidence one click away, honest windows,
filters in the URL, and the polish items (data stamp, model version, telemetry axis, SIGTERM)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import polars as pl
import pyarrow as pa
import pytest
from streamlit.testing.v1 import AppTest

from faultlens.app.dashboard import server
from faultlens.ingest.store import Store
from faultlens.reports.source_context import ROOTS_ENV
from tests.reports import smalldb

MAIN = str(Path(__file__).resolve().parents[2] / "app" / "dashboard" / "main.py")
LAST_DAY = (smalldb.START + timedelta(days=6)).date()  # the newest stamp's day (dcgm, day 6)
NEWEST = smalldb.START + timedelta(days=6, hours=1)
EARLY = smalldb.START - timedelta(days=60)  # an event two months before the rest
XID79_LINE = 10


def _app(db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **params: str) -> AppTest:
    monkeypatch.setenv("FAULTLENS_DB", str(db))
    monkeypatch.setenv("FAULTLENS_MODELS_DIR", str(tmp_path / "models"))
    at = AppTest.from_file(MAIN, default_timeout=120)
    for k, v in params.items():
        at.query_params[k] = v
    return at


@pytest.fixture
def small(tmp_path: Path) -> Path:
    return smalldb.build(tmp_path / "small.duckdb")


def _md(at: AppTest) -> str:
    return "\n".join(m.value for m in at.markdown)


def test_overview_opens_on_the_datas_own_span(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = smalldb.build(tmp_path / "small.duckdb")
    with Store(db) as store:
        row = {**smalldb.events()[0], "ts": EARLY, "kind": "thermal", "code": None}
        store.insert("events", pl.DataFrame([row]))
    at = _app(db, tmp_path, monkeypatch)
    at.run()
    assert not at.exception
    assert at.sidebar.date_input("f_range").value == (EARLY.date(), LAST_DAY)
    banner = _md(at)
    assert f"**Data span** {EARLY:%Y-%m-%d %H:%M} to {NEWEST:%Y-%m-%d %H:%M} UTC" in banner
    assert f"kernel {smalldb.XID95_TS:%Y-%m-%d %H:%M}" in banner  # newest line per source
    # the sidebar's "data as of" is the data's newest stamp, not the snapshot's time
    assert any(f"data as of {NEWEST:%Y-%m-%d %H:%M:%S} UTC" in c.value for c in at.sidebar.caption)


def test_overview_shows_fleet_state_and_incidents_linking_to_evidence(
    small: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = _app(small, tmp_path, monkeypatch)
    at.run()
    assert not at.exception
    counts = next(c.value for c in at.caption if " healthy" in c.value)
    # gpu002 scored 0.91 (at risk); gpu001 (NCCL), gpu003 (Xid 13), dgx-b-01 (Xid 95) degraded
    assert counts.startswith(
        "**0** down · **0** drained · **1** at risk · **3** degraded · **2** healthy"
    )
    text = _md(at)
    evidence = (
        f"node?from={smalldb.START.date()}&to={LAST_DAY}&node=gpu002"
        f"&file={quote('/logs/gpu002/kern.log', safe='')}&line={XID79_LINE}"
    )
    assert f"[kern.log:{XID79_LINE}]({evidence})" in text
    row = next(ln for ln in text.splitlines() if evidence in ln)
    assert "Xid 79 GPU\\_HAS\\_FALLEN\\_OFF\\_THE\\_BUS" in row and "`reboot_node`" in row
    assert "[job 101](node?" in text  # the NCCL timeout: one row for its job
    at_risk = text.split("**At risk now**")[1]
    assert "[gpu002](node?" in at_risk and "gpu003" not in at_risk  # 0.2: under the threshold


def test_a_shared_node_url_opens_the_node_range_and_evidence_lines(
    small: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    kern = logs / "kern.log"
    kern.write_text("".join(f"line {i}\n" for i in range(1, 31)))
    with Store(small) as store:
        store.execute("UPDATE events SET file = ? WHERE node = 'gpu002'", [str(kern)])
    monkeypatch.setenv(ROOTS_ENV, json.dumps([str(logs.resolve())]))
    day2, day4 = smalldb.START.date() + timedelta(days=2), smalldb.START.date() + timedelta(days=4)
    at = _app(
        small,
        tmp_path,
        monkeypatch,
        node="gpu002",
        file=str(kern),
        line=str(XID79_LINE),
        **{"from": str(day2), "to": str(day4)},
    )
    at.switch_page("views/node.py").run()
    assert not at.exception
    assert at.selectbox(key="node_pick").value == "gpu002"
    assert at.sidebar.date_input("f_range").value == (day2, day4)
    context = at.code[-1].value.splitlines()
    assert f">{XID79_LINE:>8} | line {XID79_LINE}" in context
    assert context[0] == f" {XID79_LINE - 5:>8} | line {XID79_LINE - 5}"
    # the telemetry chart (Vega-Lite, its rows as Arrow): the range's hourly samples, a line
    # per GPU, on their own span
    chart = at.get("vega_lite_chart")[-1].proto
    assert json.loads(chart.spec)["mark"]["type"] == "line"
    rows = pl.from_arrow(pa.ipc.open_stream(chart.data.data).read_all())
    per_gpu = rows.group_by("series").len()
    assert per_gpu.height == 2 and per_gpu["len"].min() >= 24
    assert rows["ts"].min() >= datetime.combine(day2, datetime.min.time())
    assert rows["ts"].max() < datetime.combine(day4 + timedelta(1), datetime.min.time())


def test_filters_are_written_to_the_url(
    small: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = _app(small, tmp_path, monkeypatch)
    at.run()
    at.multiselect(key="f_cluster").set_value(["dgx-b"]).run()
    at.text_input(key="f_job").set_value("103").run()
    params = dict(at.query_params)
    assert params["cluster"] in ("dgx-b", ["dgx-b"])
    assert params["job"] in ("103", ["103"])
    assert params["from"] in (str(smalldb.START.date()), [str(smalldb.START.date())])
    # and a new session on that URL opens the same filters
    again = _app(small, tmp_path, monkeypatch, cluster="dgx-b", job="103")
    again.run()
    assert again.multiselect(key="f_cluster").value == ["dgx-b"]
    assert {m.label: m.value for m in again.metric}["Jobs lost"] == "1"
    counts = next(c.value for c in again.caption if " healthy" in c.value)
    # the grid holds the cluster's nodes only: dgx-b-01 (Xid 95) and dgx-b-02
    assert counts.startswith("**0** down · **0** drained · **0** at risk · **1** degraded · **1**")


def test_unplaced_events_have_their_own_panel_with_the_fix(
    small: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Store(small) as store:
        row = {**smalldb.events()[0], "ts": None, "node": None, "file": "/logs/dmesg.txt"}
        store.insert("events", pl.DataFrame([row]))
    at = _app(small, tmp_path, monkeypatch)
    at.run()
    assert "1 events without a time, 1 without a node" in _md(at)
    panel = at.expander[0]
    assert panel.label == "Events without a time or a node"
    table = panel.dataframe[0].value
    fix = table["fix"][table["file"] == "/logs/dmesg.txt"].iloc[0]
    assert fix == (
        "faultlens ingest --reparse /logs/dmesg.txt --boot-time 'YYYY-MM-DD HH:MM:SS' --node NODE"
    )


def test_the_unplaced_table_does_not_hold_the_overview(
    small: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from faultlens.app.dashboard import panels
    from faultlens.reports import q_state

    with Store(small) as store:
        row = {**smalldb.events()[0], "ts": None, "node": None, "file": "/logs/dmesg.txt"}
        store.insert("events", pl.DataFrame([row]))
    counted = q_state.unplaced_events
    release = threading.Event()

    def slow(store, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202 - a full scan at 50M
        release.wait(timeout=60)
        return counted(store, *args, **kwargs)

    monkeypatch.setattr(q_state, "unplaced_events", slow)
    at = _app(small, tmp_path, monkeypatch)
    at.run()
    assert not at.exception
    panel = at.expander[0]
    assert len(panel.dataframe) == 0
    assert panels.UNPLACED_PENDING in [c.value for c in panel.caption]
    assert {m.label for m in at.metric} >= {"Jobs lost", "MTBF per node"}  # the rest is drawn
    release.set()
    for _ in range(50):  # the background count finishes; the next run shows the table
        at.run()
        if at.expander[0].dataframe:
            break
        time.sleep(0.1)
    table = at.expander[0].dataframe[0].value
    assert table["file"].tolist() == ["/logs/dmesg.txt"]


def test_job_page_shows_the_deciding_events(
    small: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = _app(small, tmp_path, monkeypatch, job="102")
    at.switch_page("views/jobs.py").run()
    assert not at.exception
    assert any(s.value == "Job 102: why it failed" for s in at.subheader)
    text = _md(at)
    assert "cause **gpu_hardware** on [gpu002](node?" in text
    deciding = next(ln for ln in text.splitlines() if "**deciding**" in ln)
    assert f"{smalldb.XID79_TS:%Y-%m-%d %H:%M:%S} gpu002 `xid`" in deciding
    assert f"kern.log:{XID79_LINE}]" in deciding


def _card(models: Path, version: str) -> None:
    (models / version).mkdir(parents=True)
    (models / version / "model_card.json").write_text(
        json.dumps({"model_version": version, "metrics": {}})
    )


def test_predictions_header_and_card_name_the_same_model(
    small: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made_by = smalldb.predictions()[0]["model_version"]
    models = tmp_path / "models"
    _card(models, made_by)
    _card(models, "failure-newer")
    (models / "LATEST").write_text("failure-newer")
    at = _app(small, tmp_path, monkeypatch)
    at.switch_page("views/predictions.py").run()
    assert not at.exception
    assert f"model {made_by}," in at.caption[0].value
    assert any(s.value == f"Model card: {made_by}" for s in at.subheader)
    assert not at.warning
    (models / made_by / "model_card.json").unlink()  # the card of the scoring model is gone
    at.switch_page("views/predictions.py").run()
    assert any(s.value == "Model card: failure-newer" for s in at.subheader)
    assert made_by in at.warning[0].value and "failure-newer" in at.warning[0].value


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.integration
def test_sigterm_to_the_dashboard_command_stops_the_streamlit_child(small: Path) -> None:
    port = server.free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "faultlens.app.cli", "dashboard", "--db", str(small)]
        + ["--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # our own group: the test signals the command alone
    )
    try:
        deadline = time.monotonic() + 60
        while not _port_open(port):  # bounded wait for the server to come up
            assert proc.poll() is None and time.monotonic() < deadline, "dashboard did not start"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)  # the command's pid only, not its group
        proc.wait(timeout=30)
        deadline = time.monotonic() + 15
        while _port_open(port) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _port_open(port), "the Streamlit child still holds the port"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # a child left behind by a failure
            except ProcessLookupError:
                pass


def test_at_risk_rows_and_events_link_to_the_node_page(
    small: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = _app(small, tmp_path, monkeypatch)
    at.switch_page("views/predictions.py").run()
    table = at.dataframe[0].value
    link = table["node_page"][table["node"] == smalldb.RISKY_NODE].iloc[0]
    assert link == f"node?from={smalldb.START.date()}&to={LAST_DAY}&node={smalldb.RISKY_NODE}"
    at.switch_page("views/events.py").run()
    at.text_input("ev_search").set_value("fallen off").run()
    at.session_state["ev_table"] = {"selection": {"rows": [0], "columns": [], "cells": []}}
    at.run()
    evidence = quote("/logs/gpu002/kern.log", safe="")
    assert any(f"node=gpu002&file={evidence}&line={XID79_LINE})" in m.value for m in at.markdown)


def test_a_cluster_that_leaves_the_urls_node_out_opens_its_node_most_worth_a_look(
    small: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = _app(small, tmp_path, monkeypatch, node="dgx-b-01")
    at.switch_page("views/node.py").run()
    assert at.selectbox(key="node_pick").value == "dgx-b-01"
    at.multiselect(key="f_cluster").set_value(["gpu"]).run()
    assert not at.exception
    # gpu002 (Xid 79, Xid 48) rather than the cluster's first name, gpu001 (the node the
    # dashboard warms for each cluster, so the change finds its queries done)
    assert at.selectbox(key="node_pick").options[0] == "gpu001"
    assert at.selectbox(key="node_pick").value == "gpu002"
    assert at.query_params["node"] in ("gpu002", ["gpu002"])

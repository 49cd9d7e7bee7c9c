"""Fleet state, incidents, the data's span and unplaced events, on the small database's story."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from faultlens.ingest.catalog import load_catalog
from faultlens.ingest.store import Store
from faultlens.reports import q_fleet, q_state
from faultlens.reports.filters import Filters
from tests.reports import smalldb

WEEK = Filters(since=smalldb.START, until=smalldb.END)
FLOOD_JOB = "777"
FLOOD_NODES = ("gpu001", "gpu004")
FLOOD_GPUS = 4  # ranks per node
FLOOD_REPEATS = 5  # watchdog lines per rank
FLOOD_START = smalldb.START + timedelta(days=4)
UNPLACED_FILE = "/logs/unknown/dmesg.txt"
UNPLACED_LINES = 3


def _rows(**over: object) -> dict:
    base = {
        "ts": None,
        "node": None,
        "gpu": None,
        "source": "kernel",
        "kind": "xid",
        "code": None,
        "severity": "error",
        "job_id": None,
        "message": "",
        "file": "/logs/x.log",
        "line": 1,
    }
    return {**base, **over}


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """The small database plus a per-rank watchdog flood of one job, a node left drained, a
    node down, and dmesg lines with neither time nor node."""
    path = smalldb.build(tmp_path / "small.duckdb")
    rows = []
    for n, node in enumerate(FLOOD_NODES):
        for gpu in range(FLOOD_GPUS):
            for k in range(FLOOD_REPEATS):
                rows.append(
                    _rows(
                        ts=FLOOD_START + timedelta(seconds=k * 60 + gpu),
                        node=node,
                        gpu=str(gpu),
                        source="nccl",
                        kind="nccl_timeout",
                        job_id=FLOOD_JOB,
                        message=f"[Rank {n * FLOOD_GPUS + gpu}] Watchdog caught collective "
                        "operation timeout",
                        file=f"/logs/{node}/train.log",
                        line=1 + k * FLOOD_GPUS + gpu,
                    )
                )
    rows.append(
        _rows(
            ts=smalldb.START + timedelta(days=6, hours=2),
            node="dgx-b-02",
            source="slurm",
            kind="node_drain",
            severity="warning",
            message="drained: hc failed",
        )
    )
    rows.append(
        _rows(
            ts=smalldb.START + timedelta(days=6, hours=3),
            node="gpu004",
            source="slurm",
            kind="node_down",
            severity="critical",
            message="not responding",
        )
    )
    for i in range(UNPLACED_LINES):
        rows.append(
            _rows(code=79, severity="critical", message="Xid 79", file=UNPLACED_FILE, line=i + 1)
        )
    with Store(path) as store:
        store.insert("events", pl.DataFrame(rows, infer_schema_length=None))
    return path


@pytest.fixture
def store(db: Path):
    with Store(db, read_only=True) as s:
        yield s


def test_fleet_state_colours_each_node_from_slurm_predictions_and_events(store: Store) -> None:
    state = q_state.fleet_state(store, WEEK, q_fleet.node_list(store))
    by_node = dict(zip(state["node"], state["state"], strict=True))
    assert by_node == {
        "gpu001": "degraded",  # NCCL timeouts (job 101, the flood)
        "gpu002": "at risk",  # drained after its Xid 79 but resumed; scored 0.91
        "gpu003": "degraded",  # Xid 13 logged as an error
        "gpu004": "down",  # Slurm: node_down, nothing after
        "dgx-b-01": "degraded",  # Xid 95
        "dgx-b-02": "drained",  # Slurm: node_drain, no resume
    }
    groups = dict(zip(state["node"], state["group"], strict=True))
    assert groups["gpu001"] == "gpu"  # the partition of its jobs
    assert groups["dgx-b-02"] == "dgx-b"  # no job: the name's cluster
    assert q_state.state_counts(state) == {
        "down": 1,
        "drained": 1,
        "at risk": 1,
        "degraded": 3,
        "healthy": 0,
    }
    hover = dict(zip(state["node"], state["gpus"], strict=True))
    assert "gpu 0000:1a:00.0: xid 95" in hover["dgx-b-01"]


def test_a_gpus_kinds_are_listed_in_one_order_on_every_run(store: Store) -> None:
    """gpu002's GPU logged an Xid 79 and an Xid 48 (two events): the hover names them sorted,
    not in whichever order the aggregation met them (it varied from run to run)."""
    for _ in range(5):
        state = q_state.fleet_state(
            store, Filters(since=smalldb.START, until=smalldb.END), ["gpu002"]
        )
        assert state["gpus"].to_list() == ["gpu 0000:3b:00.0: xid 48, xid 79 ×2"]


def test_a_resume_after_the_errors_leaves_the_node_healthy(store: Store) -> None:
    """gpu002's Xid 79 came before its resume: alone (no prediction) it is not degraded."""
    before_prediction = Filters(since=smalldb.START, until=smalldb.XID48_TS)
    state = q_state.fleet_state(store, before_prediction, ["gpu002"])
    assert state["state"].to_list() == ["healthy"]


def test_a_per_rank_flood_is_one_incident_row(store: Store) -> None:
    inc = q_state.incidents(store, WEEK)
    flood = inc.filter(pl.col("subject") == f"job {FLOOD_JOB}")
    assert flood.height == 1
    row = flood.row(0, named=True)
    assert row["events"] == len(FLOOD_NODES) * FLOOD_GPUS * FLOOD_REPEATS
    assert row["ranks"] == len(FLOOD_NODES) * FLOOD_GPUS
    assert row["first_seen"] == FLOOD_START
    last = FLOOD_START + timedelta(seconds=(FLOOD_REPEATS - 1) * 60 + FLOOD_GPUS - 1)
    assert row["last_seen"] == last
    assert row["nodes"] == ",".join(sorted(FLOOD_NODES))
    assert (row["file"], row["line"]) == (f"/logs/{FLOOD_NODES[0]}/train.log", 1)
    assert row["action"] == "restart_app"


def test_incidents_carry_the_xid_catalogs_action_and_runbook(store: Store) -> None:
    catalog = load_catalog().filter(pl.col("xid") == 79).row(0, named=True)
    inc = q_state.incidents(store, WEEK)
    xid79 = inc.filter((pl.col("subject") == "gpu002") & (pl.col("code") == 79)).row(0, named=True)
    assert xid79["action"] == catalog["typical_action"]
    assert xid79["runbook"] == catalog["notes"]
    assert xid79["cause"].startswith("Xid 79 ")
    assert (xid79["file"], xid79["line"]) == ("/logs/gpu002/kern.log", 10)
    # critical first, then newest first
    sev = inc["severity"].to_list()
    assert sev == sorted(sev, key=["critical", "error", "warning"].index)


def test_undated_node_less_events_are_an_incident_of_their_file(store: Store) -> None:
    inc = q_state.incidents(store, Filters())  # no range: undated rows are selectable
    row = inc.filter(pl.col("subject") == f"file {UNPLACED_FILE}").row(0, named=True)
    assert row["events"] == UNPLACED_LINES and row["first_seen"] is None


def test_data_span_names_the_newest_line_of_each_source(store: Store) -> None:
    span = q_state.data_span(store)
    newest = dict(zip(span["source"], span["newest"], strict=True))
    assert newest["kernel"] == smalldb.XID95_TS
    assert newest["nccl"] == FLOOD_START + timedelta(seconds=(FLOOD_REPEATS - 1) * 60 + 3)
    assert newest["dcgm"] == smalldb.START + timedelta(days=6, hours=1)
    assert newest["slurm jobs"] == smalldb.XID95_TS + timedelta(minutes=5)
    undated = dict(zip(span["source"], span["undated"], strict=True))
    assert undated["kernel"] == UNPLACED_LINES


def test_unplaced_events_say_how_to_fix_them(store: Store) -> None:
    frame = q_state.unplaced_events(store)
    row = frame.filter(pl.col("file") == UNPLACED_FILE).row(0, named=True)
    assert row["events"] == UNPLACED_LINES and row["missing"] == "no time, no node"
    assert row["fix"].startswith(f"faultlens ingest --reparse {UNPLACED_FILE} --boot-time ")
    assert row["fix"].endswith("--node NODE")


@pytest.mark.parametrize(
    ("missing", "flag", "fix"),
    [
        (
            "no time",
            "boot_relative",
            "faultlens ingest --reparse f.log --boot-time 'YYYY-MM-DD HH:MM:SS'",
        ),
        ("no time", "no_year", "faultlens ingest --reparse f.log --year YYYY"),
        ("no time", "no_ts", "(the lines carry no time)"),
        (
            "no time, no node",
            "no_ts",
            "faultlens ingest --reparse f.log --node NODE (the lines carry no time)",
        ),
        ("no time", "tz_unknown", "faultlens ingest --reparse f.log --tz ZONE"),
        ("no time", "tz_gap", "faultlens ingest --reparse f.log --tz ZONE"),
        (
            "no time",
            "tz_ambiguous",
            "(a wall-clock time the zone showed twice (clocks turned back): log in UTC or with "
            "an offset (rsyslog RFC 3339, journalctl --utc))",
        ),
        (
            "no time",
            "cpu_clock",
            "(Slurm's LogTimeFormat=clock is CPU time: set LogTimeFormat=iso8601_ms)",
        ),
        (
            "no time",
            "relative_time",
            "(Slurm wrote relative times: list again with SLURM_TIME_FORMAT=standard)",
        ),
        ("no time", "a_new_flag", "(no time (a_new_flag))"),
        ("no node", None, "faultlens ingest --reparse f.log --node NODE"),
    ],
)
def test_the_fix_follows_why_the_time_is_missing(missing, flag, fix) -> None:
    assert q_state._fix_for("f.log", missing, flag) == fix


def test_report_groups_repeated_errors(db: Path, tmp_path: Path) -> None:
    from faultlens.reports.sections import events

    with Store(db, read_only=True) as store:
        table = dict(events(store, WEEK).tables)[
            "Errors and critical events, repeated lines grouped"
        ]
    flood = table.filter(pl.col("subject") == f"job {FLOOD_JOB}")
    assert flood.height == 1
    assert flood["events"][0] == len(FLOOD_NODES) * FLOOD_GPUS * FLOOD_REPEATS
    assert table.height < 10  # 40 watchdog lines, a handful of rows


def test_report_at_risk_lists_only_nodes_above_the_watch_threshold(store: Store) -> None:
    from faultlens.reports.sections import nodes

    caption, table = nodes(store, Filters(until=datetime(2025, 4, 1))).tables[1]
    assert str(q_state.WATCH_THRESHOLD) in caption
    assert table["node"].to_list() == [smalldb.RISKY_NODE]  # gpu003 scored 0.2: not listed

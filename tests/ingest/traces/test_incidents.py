"""Incident records: the shapes (one row per incident, paired events, nested or one-column-per-level
categories, offsets from an epoch) into incidents, incident events and the fleet's nodes."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from faultlens.ingest import registry
from faultlens.ingest.base import ParseContext
from faultlens.ingest.pipeline import ingest_paths
from faultlens.ingest.schema import IncidentCategory
from faultlens.ingest.traces.incident_shapes import categorize, categorize_expr

NOW = datetime(2026, 1, 1)
EPOCH = datetime(2024, 3, 1)

# (node, start offset h, repair h, level, class, description) of a ticket export
TICKETS = [
    ("gpu-001", 10.0, 4.0, "Hardware", "GPU", "Xid 79 fallen off the bus"),
    ("gpu-002", 30.5, 20.0, "Hardware", "Memory Dimm", "DIMM B2 replaced"),
    ("gpu-001", 100.0, 0.5, "Software", "OS", "kernel panic after update"),
    ("gpu-003", 200.0, 48.0, "Network", "Cable", "IB cable reseated"),
]


def _ingest(store, path: Path, **options) -> dict:
    ctx = ParseContext(file="", options=options)
    report = ingest_paths(store, [str(path)], now=NOW, base_ctx=ctx)
    return report.files[0].to_json()


def test_offsets_from_an_epoch_with_one_column_per_level(store, tmp_path: Path) -> None:
    levels = ["Hardware", "Software", "Network"]
    header = "host,start_h,end_h," + ",".join(levels) + ",notes"
    rows = [header]
    for node, start, rep, level, klass, desc in TICKETS:
        cells = [klass if lv == level else "" for lv in levels]
        rows.append(f"{node},{start},{start + rep},{','.join(cells)},{desc}")
    path = tmp_path / "tickets.csv"
    path.write_text("\n".join(rows) + "\n")
    rep = _ingest(store, path, dataset="ops", epoch=EPOCH)
    assert rep["format"] == "incidents"
    assert (rep["parsed"], rep["quarantined"], rep["lines"]) == (len(TICKETS), 0, len(rows))
    got = store.query(
        'SELECT node, start, "end", repair_h, level, class, category, severity, dataset, line '
        "FROM incidents ORDER BY line"
    )
    for i, (node, start, repair, level, klass, _) in enumerate(TICKETS):
        row = got.row(i, named=True)
        assert row["node"] == node and row["dataset"] == "ops"
        assert row["start"] == EPOCH + timedelta(hours=start)
        assert row["repair_h"] == pytest.approx(repair)
        assert (row["level"], row["class"]) == (level, klass)
        assert row["line"] == i + 2
    assert got["category"].to_list() == ["gpu", "host", "software", "network"]
    assert got["severity"].to_list() == ["critical", "critical", "error", "error"]
    events = store.query("SELECT node, ts, kind, source, subkind FROM events ORDER BY ts")
    assert events["kind"].unique().to_list() == ["incident"]
    assert events["ts"].to_list() == sorted(EPOCH + timedelta(hours=t[1]) for t in TICKETS)
    nodes = store.query("SELECT node, first_seen, last_seen FROM nodes ORDER BY node")
    assert nodes["node"].to_list() == ["gpu-001", "gpu-002", "gpu-003"]
    assert nodes["last_seen"][0] == EPOCH + timedelta(hours=100.5)
    assert store.scalar("SELECT dataset FROM dataset_files") == "ops"


def test_paired_start_end_events_in_json_lines(store, tmp_path: Path) -> None:
    t0 = datetime(2025, 5, 1, 8)
    lines = []
    for node, start, rep, level, _, desc in TICKETS:
        at = t0 + timedelta(hours=start)
        lines.append(
            {"node": node, "time": at.isoformat(), "event": "down", "cause": level, "reason": desc}
        )
        lines.append({"node": node, "time": (at + timedelta(hours=rep)).isoformat(), "event": "up"})
    lines.sort(key=lambda r: r["time"])
    path = tmp_path / "pairs.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    rep = _ingest(store, path)
    assert rep["format"] == "incidents"
    got = store.query("SELECT node, start, repair_h, level FROM incidents ORDER BY start")
    assert got.height == len(TICKETS)
    want = sorted(TICKETS, key=lambda t: t[1])
    assert got["repair_h"].to_list() == pytest.approx([t[2] for t in want])
    assert got["level"].to_list() == [t[3] for t in want]
    assert store.count("dataset_files") == 0  # the site's own history


def test_nested_categories_in_a_json_document(store, tmp_path: Path) -> None:
    doc = {
        "tickets": [
            {
                "hostname": "node7.cluster.example",
                "opened": "2025-01-02T03:04:05Z",
                "resolved": "2025-01-02T05:04:05Z",
                "category": {"level": "GPU", "class": "HBM", "description": "row remap failure"},
                "severity": "warning",
            },
            {"hostname": "", "opened": "2025-01-03T00:00:00Z"},
        ]
    }
    path = tmp_path / "tickets.json"
    path.write_text(json.dumps(doc, indent=2))
    rep = _ingest(store, path)
    assert rep["quarantined"] == 1
    row = store.query("SELECT * FROM incidents").row(0, named=True)
    assert row["node"] == "node7"
    assert row["repair_h"] == pytest.approx(2.0)
    assert (row["level"], row["class"], row["category"]) == ("GPU", "HBM", "gpu_memory")
    assert row["severity"] == "warning"
    assert store.scalar("SELECT reason FROM quarantine") == "incident without a node"


def test_column_mapping_names_unknown_columns(store, tmp_path: Path) -> None:
    path = tmp_path / "odd.csv"
    path.write_text("box,when,back,what\nn1,2025-02-01 10:00,2025-02-01 12:30,PSU fan\n")
    ctx = ParseContext(
        file="", options={"map": {"node": "box", "start": "when", "end": "back", "class": "what"}}
    )
    ingest_paths(store, [str(path)], now=NOW, fmt="incidents", base_ctx=ctx)
    row = store.query("SELECT node, repair_h, category FROM incidents").row(0)
    assert row == ("n1", pytest.approx(2.5), "host")


def test_a_system_size_puts_the_whole_system_in_the_fleet(store, tmp_path: Path) -> None:
    path = tmp_path / "sys.csv"
    path.write_text(
        "System,nodes,nodenum,Prob Started,Prob Fixed,Hardware,Software\n"
        "7,4,2,1/5/2003 10:00,1/5/2003 11:00,CPU,\n"
        "7,4,,2/5/2003 10:00,2/5/2003 10:30,,OS\n"
    )
    _ingest(store, path, dataset="old")
    nodes = store.query("SELECT node FROM nodes ORDER BY node")["node"].to_list()
    assert nodes == ["7-n0", "7-n1", "7-n2", "7-n3", "7-system"]
    assert store.query("SELECT node FROM incidents ORDER BY start")["node"].to_list() == [
        "7-n2",
        "7-system",
    ]


@pytest.mark.parametrize(
    ("level", "klass", "desc", "want"),
    [
        ("Hardware", "Graphics Accel Hdwr", None, IncidentCategory.GPU),
        ("Hardware", "Memory Dimm", None, IncidentCategory.HOST),
        ("Hardware", "Maintenance", None, IncidentCategory.MAINTENANCE),
        ("DBE", "DBE", None, IncidentCategory.GPU_MEMORY),
        ("Human Error", "Human Error", None, IncidentCategory.USER),
        ("Undetermined", "Unresolvable", None, IncidentCategory.UNKNOWN),
        ("Software", None, "NCCL watchdog timeout", IncidentCategory.SOFTWARE),
        ("Facilities", "Chillers", None, IncidentCategory.HOST),
    ],
)
def test_categories(level, klass, desc, want) -> None:
    assert categorize(level, klass, desc) is want


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["Hardware", "Software", "Network", "gpu", None, "Undetermined"]),
            st.sampled_from(["CPU", "HBM", "Xid 79", "switch", "OS", None, "Other", "UPS"]),
            st.one_of(st.none(), st.text(max_size=20)),
        ),
        min_size=1,
        max_size=20,
    )
)
def test_vectorized_categories_agree_with_the_reference(rows) -> None:
    frame = pl.DataFrame(
        rows, schema={"l": pl.String, "c": pl.String, "d": pl.String}, orient="row"
    )
    got = frame.select(categorize_expr(pl.col("l"), pl.col("c"), pl.col("d")))
    assert got.to_series().to_list() == [categorize(*r).value for r in rows]


@settings(max_examples=40, deadline=None)
@given(st.binary(max_size=400))
def test_arbitrary_bytes_never_crash_and_every_line_is_accounted(tmp_path_factory, data) -> None:
    from faultlens.ingest.store import Store

    folder = tmp_path_factory.mktemp("fuzz")
    path = folder / "x.csv"
    path.write_bytes(b"node,start,end,category\n" + data)
    with Store(folder / "t.duckdb") as store:
        rep = ingest_paths(store, [str(path)], now=NOW, fmt="incidents").files[0]
    if rep.status != "failed":
        assert rep.lines == rep.parsed + rep.noise + rep.quarantined


def test_sniffing_prefers_the_incident_readers() -> None:
    head = ["node,start,end,category,description", "a,2025-01-01,2025-01-02,GPU,x"]
    assert registry.sniff(head, "t.csv")[0] == "incidents"
    residency = ["SN,location,insert,remove,duration,out,event"]
    assert registry.sniff(residency, "g.csv")[0] == "unit_residency"
    life = ["SN,time,nlife,nloc,last,batch,dead"]
    assert registry.sniff(life, "s.csv")[0] == "unit_lifetimes"
    jobs = ["job_id,user,node_num,gpu_num,state,submit_time,start_time,end_time"]
    assert registry.sniff(jobs, "j.csv")[0] != "incidents"


def test_the_start_column_is_the_one_whose_times_read(store, tmp_path: Path) -> None:
    """A log table (Loghub's BlueGene/L records have this header) holds ``Time`` in its own form,
    the site's wall clock, beside ``Timestamp`` in Unix seconds: the start is read from the
    column that gives a time for the rows, Unix seconds before a wall clock of no zone; a
    ``Level`` of log levels is the severity, ``Content`` the description."""
    base = datetime(2005, 6, 3, 22, 42, 50)
    rows = [
        ("R02-M1-N0-C:J12-U11", 0, "INFO", "instruction cache parity error corrected"),
        ("R23-M0-NE-C:J05-U01", 3_600, "FATAL", "data TLB error interrupt"),
        ("R30-M0-N9-C:J16-U01", 7_200, "SEVERE", "ciod: failed to read message prefix"),
    ]
    lines = ["LineId,Label,Timestamp,Date,Node,Time,Component,Level,Content"]
    for i, (node, dt, level, content) in enumerate(rows, 1):
        utc = base + timedelta(seconds=dt)
        local = utc - timedelta(hours=7)  # what the Time column of such a file says
        lines.append(
            f"{i},-,{int((utc - datetime(1970, 1, 1)).total_seconds())},"
            f"{local:%Y.%m.%d},{node},{local:%Y-%m-%d-%H.%M.%S}.123456,KERNEL,{level},{content}"
        )
    path = tmp_path / "ras_structured.csv"
    path.write_text("\n".join(lines) + "\n")
    rep = _ingest(store, path)
    assert (rep["format"], rep["parsed"], rep["quarantined"]) == ("incidents", 3, 0)
    got = store.query(
        "SELECT node, start, severity, description, line FROM incidents ORDER BY line"
    )
    assert got["start"].to_list() == [base + timedelta(seconds=r[1]) for r in rows]
    assert got["description"].to_list() == [r[3] for r in rows]
    assert got["severity"][0] == "warning"  # an INFO record is not a failure
    assert "warning" not in got["severity"][1:].to_list()
    assert got["line"].to_list() == [2, 3, 4]


def test_a_wall_clock_in_the_bluegene_form_alone_is_read(store, tmp_path: Path) -> None:
    path = tmp_path / "ras.csv"
    path.write_text(
        "node,time,level,description\n"
        "R02-M1-N0,2005-06-03-15.42.50.675872,FATAL,machine check interrupt\n"
        "R02-M1-N1,2005-06-03-16.00.00.000001,ERROR,torus receiver error\n"
    )
    rep = _ingest(store, path)
    assert (rep["parsed"], rep["quarantined"]) == (2, 0)
    assert store.query("SELECT start FROM incidents ORDER BY line")["start"].to_list() == [
        datetime(2005, 6, 3, 15, 42, 50, 675872),
        datetime(2005, 6, 3, 16, 0, 0, 1),
    ]


def test_loghub_bluegene_records_in_place(store, corpus: Path) -> None:
    """The real file: every record read (its header is noise), none quarantined."""
    path = corpus / "loghub" / "loghub-BGL_2k.log_structured.csv"
    n = sum(1 for _ in path.open(encoding="utf-8", errors="replace"))
    rep = _ingest(store, path)
    assert (rep["format"], rep["lines"], rep["quarantined"]) == ("incidents", n, 0)
    assert rep["parsed"] == n - 1
    lines = store.query("SELECT line FROM incidents ORDER BY line")["line"].to_list()
    assert lines == list(range(2, n + 1))
    assert store.scalar("SELECT count(*) FROM incidents WHERE start IS NULL") == 0

"""NCCL RAS: the RAS thread's log lines (through the every-family reader) and the ``ncclras``
status report, from files written from NCCL's format strings (``src/ras/rasnet.cc``,
``src/ras/client_support.cc``) with our own hosts, pids and hashes. Every event is checked by
its line number."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from faultlens.ingest.base import ParseContext
from faultlens.ingest.lines import LinesParser
from faultlens.ingest.nccl import ras
from faultlens.ingest.pipeline import ingest_paths
from faultlens.ingest.registry import sniff
from faultlens.ingest.store import Store

DATA = Path(__file__).resolve().parent / "ras_data"
NOW = datetime(2025, 6, 1)


def _ingest(store: Store, name: str) -> tuple[object, dict[int, dict]]:
    (f,) = ingest_paths(store, [str(DATA / name)], now=NOW).files
    rows = store.query("SELECT * FROM events ORDER BY line").to_dicts()
    assert len({r["line"] for r in rows}) == len(rows)
    return f, {r["line"]: r for r in rows}


# -- log lines ------------------------------------------------------------------------------

# line -> (subkind, severity, node = the peer of the connection), as the format strings say
LINE_EVENTS = {
    2: ("keepalive_timeout", "warning", "10.1.0.12"),
    3: ("keepalive_timeout", "error", "10.1.0.12"),
    4: ("peer_dead", "error", "10.1.0.12"),  # "connect retry timeout": declared dead
    5: ("connect_timeout", "warning", "10.1.0.13"),
    6: ("init_timeout", "warning", "10.1.0.14"),
    7: ("peer_disconnected", "info", "10.1.0.15"),
    9: ("send_stuck", "warning", "10.1.0.17"),
    11: ("connect_timeout", "warning", "10.1.0.18"),
}


def test_ras_log_lines_behind_any_prefix(store: Store) -> None:
    f, ev = _ingest(store, "ras-lines.log")
    assert (f.format, f.status, f.lines, f.parsed, f.noise, f.quarantined) == (
        "lines",
        "ok",
        11,
        len(LINE_EVENTS) + 1,  # and the kernel's Xid on line 10
        2,  # the listening-socket notice (1) and the idle timeout (8)
        0,
    )
    ras_rows = {n: r for n, r in ev.items() if r["kind"] == "nccl_ras"}
    got = {n: (r["subkind"], r["severity"], r["node"]) for n, r in ras_rows.items()}
    assert got == LINE_EVENTS
    assert {r["source"] for r in ras_rows.values()} == {"nccl"}
    assert (ev[10]["kind"], ev[10]["code"], ev[10]["source"]) == ("xid", 79, "kernel")
    a2, a6, a9 = (json.loads(ev[n]["attrs"]) for n in (2, 6, 9))
    assert a2 == {"reporter": "gpu-a01", "reporter_pid": 12345, "timeout_s": 5.2}
    assert (a6["reporter"], a6["timeout_s"]) == ("gpu-a02", 20.0)
    assert a9 == {"timeout_s": 20.0}  # header stripped: no reporter known
    assert ev[3]["ts"] == datetime(2025, 3, 4, 10, 11, 12)  # the collector's stamp
    assert ev[2]["ts"] is None and ev[2]["ts_flag"] == "no_ts"


def test_line_reference_agrees_with_the_chunk_path() -> None:
    ctx = ParseContext(file="ras-lines.log")
    lines = (DATA / "ras-lines.log").read_text().splitlines()
    ref = {}
    for n, text in enumerate(lines, 1):
        if any(lit in text for lit in ras.LITERALS):
            found = ras.parse_line_reference(text)
            if found:
                ref[n] = (found["subkind"], found["severity"], found["node"])
    assert ref == LINE_EVENTS
    cand = pl.DataFrame({"line": range(1, len(lines) + 1), "raw": lines})
    cand = cand.filter(pl.col("raw").str.contains(ras.ANCHOR))
    out = ras.line_rows(cand, ctx).tables["events"]
    assert {r["line"]: (r["subkind"], r["severity"], r["node"]) for r in out.to_dicts()} == ref


def test_a_ras_warn_line_is_a_warning_about_its_own_host() -> None:
    line = "gpu-b07:4242:4250 [5] ras/ras.cc:321 NCCL WARN RAS any message the thread gives"
    parsed = LinesParser().parse_line(line, ParseContext(file="x.log"))
    (row,) = parsed.rows["events"]
    assert (row["kind"], row["subkind"], row["severity"]) == ("nccl_ras", "ras_warn", "warning")
    assert (row["node"], row["pid"]) == ("gpu-b07", 4242)
    info = "gpu-b07:4242:4250 [5] NCCL INFO RAS handling peersUpdate from 10.0.0.1<1234>"
    assert LinesParser().parse_line(info, ParseContext(file="x.log")) is None


# -- the status report -------------------------------------------------------------------------------

# the finding blocks of ncclras-status.txt: (first line, last line)
BLOCKS = [(22, 25), (27, 29), (31, 35), (37, 41), (46, 47), (49, 52), (54, 57), (59, 62)]
HASH0, HASH1, HASH2 = "5ab3c1d2e4f60718", "0c0ffee000000001", "0c0ffee000000002"
# line -> (subkind, severity, node, pid, gpu_index)
REPORT_EVENTS = {
    24: ("missing_process", "warning", "10.20.0.7", 41001, 3),
    25: ("missing_process", "warning", "10.20.0.7", 41002, 4),
    29: ("dead_process", "error", "10.20.0.9", 52007, 7),
    33: ("missing_rank", "warning", "10.20.0.7", 41001, 3),
    34: ("missing_rank", "warning", "10.20.0.7", 41002, 4),
    35: ("missing_rank", "warning", None, None, None),
    40: ("rank_error", "error", "10.20.0.7", 41000, 2),
    41: ("rank_error", "error", "10.20.0.7", 41003, 5),
    47: ("collection_timeout", "warning", None, None, None),
    52: ("rank_mismatch", "warning", "10.20.0.2", 33004, 4),
    57: ("rank_mismatch", "warning", "10.20.0.5", 60000, 0),
    61: ("rank_mismatch", "warning", None, None, None),  # the block names nobody: its count
}


def test_the_status_report(store: Store) -> None:
    f, ev = _ingest(store, "ncclras-status.txt")
    parsed = sum(b - a + 1 for a, b in BLOCKS)
    assert (f.format, f.status, f.lines, f.parsed, f.noise) == ("ncclras", "ok", 62, parsed, 31)
    got = {
        n: (r["subkind"], r["severity"], r["node"], r["pid"], r["gpu_index"]) for n, r in ev.items()
    }
    assert got == REPORT_EVENTS
    attrs = {n: json.loads(r["attrs"]) for n, r in ev.items()}
    assert {n for n, a in attrs.items() if a.get("comm_hash") == HASH0} == {33, 34, 35, 40, 41, 52}
    assert (attrs[57]["comm_hash"], attrs[61]["comm_hash"]) == (HASH1, HASH2)
    assert [attrs[n]["rank"] for n in (33, 34, 35, 40, 41, 52, 57)] == [27, 28, 63, 26, 29, 12, 0]
    assert (attrs[40]["error"], attrs[40]["phase"]) == ("Remote process error", "Asynchronous")
    assert attrs[41]["nvml"] == "1"
    assert (attrs[52]["mismatch"], attrs[52]["detail"]) == (
        "AllReduce",
        "has launched up to operation 811",
    )
    assert (attrs[57]["mismatch"], attrs[57]["detail"]) == ("status", "has status ABORT")
    assert (attrs[47]["count"], attrs[61]["count"], attrs[61]["mismatch"]) == (3, 4, "Broadcast")
    assert {a["nccl_version"] for a in attrs.values()} == {"2.27.3+cuda12.9"}
    assert all(r["ts"] is None and r["ts_flag"] == "no_ts" for r in ev.values())
    assert {r["kind"] for r in ev.values()} == {"nccl_ras"}


def test_blocks_that_name_nobody_give_their_count(store: Store) -> None:
    f, ev = _ingest(store, "ncclras-many-missing.txt")
    # INCOMPLETE 21-22, DEAD 24-27, the comm's INCOMPLETE 29-30
    assert (f.format, f.lines, f.parsed, f.noise) == ("ncclras", 34, 8, 26)
    got = {n: (r["subkind"], r["node"], json.loads(r["attrs"]).get("count")) for n, r in ev.items()}
    assert got == {
        22: ("missing_process", None, 16),
        26: ("dead_process", "10.30.1.4", None),
        27: ("dead_process", None, 1),  # "[could not find information on 1 process]"
        30: ("missing_rank", None, 16),
    }
    a26 = json.loads(ev[26]["attrs"])
    assert (a26["gpus"], a26["nvml"], ev[26]["gpu_index"]) == ("0,1", "2,3", None)


def test_sniffing_the_report_and_not_an_nccl_log() -> None:
    head = (DATA / "ncclras-status.txt").read_text().splitlines()
    assert sniff(head, "status.txt")[0] == "ncclras"
    nccl_log = ["NCCL version 2.27.3+cuda12.9", "gpu-a01:1:2 [0] NCCL INFO Bootstrap : Using eth0"]
    assert ras.sniff_report(nccl_log) == 0.0
    assert ras.sniff_report(head[:3]) == 0.0  # no "Job summary" yet


def test_one_line_of_a_report_is_noise() -> None:
    line = "  Process 41001 on node 10.20.0.7 managing GPU 3"
    assert ras.RasReportParser().parse_line(line, ParseContext(file="r.txt")) is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(sorted({*(DATA / "ncclras-status.txt").read_text().split("\n")}))))
def test_any_arrangement_of_report_lines_is_accounted_for(picked: list[str]) -> None:
    lines = pl.Series(picked, dtype=pl.String).replace("", None)
    out = ras.report_rows(lines, 1, ParseContext(file="r.txt"))
    got = out.parsed_lines.to_list()
    assert len(got) == len(set(got)) == out.parsed
    assert set(got) <= set(range(1, len(picked) + 1))
    events = out.tables.get("events")
    if events is not None:
        assert set(events["line"].to_list()) <= set(got)


# -- the JSON report ---------------------------------------------------------------------------------


def test_the_json_report(store: Store) -> None:
    f, ev = _ingest(store, "ncclras-status.json")
    assert (f.format, f.status, f.lines, f.quarantined) == ("ncclras", "ok", 88, 0)
    assert (f.parsed, f.noise) == (4, 84)
    got = {
        n: (r["subkind"], r["severity"], r["node"], r["pid"], r["gpu_index"]) for n, r in ev.items()
    }
    assert got == {
        37: ("rank_error", "error", "10.40.0.1", 7002, 1),  # async_error 6 (ncclRemoteError)
        60: ("missing_rank", "warning", "10.40.0.2", 8001, 0),  # unresponsive
        71: ("dead_process", "error", "10.40.0.2", 8002, 1),  # considered dead
        86: ("collection_timeout", "warning", None, None, None),
    }
    attrs = {n: json.loads(r["attrs"]) for n, r in ev.items()}
    assert {n: a.get("comm_hash") for n, a in attrs.items()} == {
        37: "7c1e2d3f4a5b6c7d",
        60: "7c1e2d3f4a5b6c7d",
        71: "7c1e2d3f4a5b6c7d",
        86: None,
    }
    assert (attrs[37]["rank"], attrs[37]["phase"], attrs[37]["code"]) == (1, "Asynchronous", 6)
    assert (attrs[71]["rank"], attrs[71]["dead"], attrs[86]["count"]) == (3, True, 2)


def test_a_half_written_json_report_is_quarantined(store: Store, tmp_path: Path) -> None:
    text = (DATA / "ncclras-status.json").read_text().splitlines()[:40]
    path = tmp_path / "half.json"
    path.write_text("\n".join(text) + "\n")
    (f,) = ingest_paths(store, [str(path)], now=NOW).files
    assert (f.format, f.lines, f.parsed, f.quarantined) == ("ncclras", 40, 0, 40)
    reasons = store.query("SELECT DISTINCT reason FROM quarantine").to_series().to_list()
    assert len(reasons) == 1 and reasons[0].startswith("invalid ncclras JSON report")

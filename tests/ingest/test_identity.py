"""Identity from evidence: node and time from the file or the caller, never guessed; what is
missing is kept, flagged, counted, and can be fixed with ``--reparse``."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

from typer.testing import CliRunner

from faultlens.app.cli import app
from faultlens.ingest.base import ParseContext
from faultlens.ingest.pipeline import ingest_paths
from faultlens.ingest.store import Store

NOW = datetime(2025, 1, 1)
BOOT = datetime(2024, 5, 1, 8, 0, 0)
UPTIMES_S = (12.5, 3600.25, 7200.0)
DMESG = "".join(
    f"[{up:12.6f}] NVRM: Xid (PCI:0000:3b:00): 79, pid=77, name=python, GPU has fallen off\n"
    for up in UPTIMES_S
)


def _node_log(tmp_path: Path) -> Path:
    """A dmesg capture in a per-node folder: its lines name no host, nor a wall time."""
    path = tmp_path / "nodes" / "gpu0042" / "kern.log"
    path.parent.mkdir(parents=True)
    path.write_text(DMESG)
    return path


def _rows(store: Store) -> list[tuple]:
    return store.query(
        "SELECT line, ts, ts_flag, node, node_source FROM events ORDER BY line"
    ).rows()


def test_a_folder_is_not_a_node_and_the_unplaced_are_counted(store: Store, tmp_path: Path):
    (f,) = ingest_paths(store, [str(_node_log(tmp_path))], now=NOW).files
    assert [r[3:] for r in _rows(store)] == [(None, None)] * 3
    assert (f.events_no_ts, f.events_no_node) == (3, 3)


def test_node_from_a_path_pattern_or_the_option(store: Store, tmp_path: Path):
    path = _node_log(tmp_path)
    ctx = ParseContext(file="", node_pattern=r"/nodes/(?P<node>[^/]+)/")
    (f,) = ingest_paths(store, [str(path)], now=NOW, base_ctx=ctx).files
    assert {r[3:] for r in _rows(store)} == {("gpu0042", "path")}
    assert f.events_no_node == 0
    ctx = ParseContext(file="", node="GPU-7.cluster.local")
    ingest_paths(store, [str(path)], now=NOW, base_ctx=ctx, reparse=True)
    assert {r[3:] for r in _rows(store)} == {("gpu-7", "option")}


def test_reparse_replaces_the_rows_with_corrected_time_and_node(db_path: Path, tmp_path: Path):
    path = _node_log(tmp_path)
    with Store(db_path) as store:
        ingest_paths(store, [str(path)], now=NOW)
        (again,) = ingest_paths(store, [str(path)], now=NOW).files
        assert again.status == "unchanged"
        ctx = ParseContext(file="", node="gpu0042", boot_time=BOOT)
        (f,) = ingest_paths(store, [str(path)], now=NOW, base_ctx=ctx, reparse=True).files
        assert (f.status, f.parsed, f.events_no_ts, f.events_no_node) == ("ok", 3, 0, 0)
        expected = [BOOT + timedelta(seconds=up) for up in UPTIMES_S]
        rows = _rows(store)
        assert [r[1] for r in rows] == expected  # replaced, not doubled
        assert {r[3] for r in rows} == {"gpu0042"}
        assert store.count("ingested_files") == 1


def test_year_taken_from_mtime_is_flagged(store: Store, tmp_path: Path):
    path = tmp_path / "kern.log"
    path.write_text(
        "May  1 10:00:00 gpu-9 kernel: NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception\n"
    )
    ingest_paths(store, [str(path)], now=NOW)
    assert _rows(store)[0][2:4] == ("year_from_mtime", "gpu-9")
    ctx = ParseContext(file="", year=2024)
    ingest_paths(store, [str(path)], now=NOW, base_ctx=ctx, reparse=True)
    assert [r[1:3] for r in _rows(store)] == [(datetime(2024, 5, 1, 10), None)]


RANKED = """gpu-a:100:200 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 18000 - Init START
gpu-b:300:400 [0] NCCL INFO comm 0x1 rank 1 nranks 2 cudaDev 0 busId 18000 - Init START
[rank1]:[E1129 13:05:01.123456 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective \
operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=8, NumelOut=8, \
Timeout(ms)=600000) ran for 600123 milliseconds before timing out.
"""


def test_node_of_a_rank_from_the_nccl_rank_map(store: Store, tmp_path: Path):
    path = tmp_path / "job.log"
    path.write_text(RANKED)
    ingest_paths(store, [str(path)], now=NOW, base_ctx=ParseContext(file="", year=2024))
    ev = store.query("SELECT line, kind, node, node_source FROM events").rows()
    assert ev == [(3, "nccl_timeout", "gpu-b", "rank_map")]


def test_ingest_and_status_report_the_unplaced(db_path: Path, tmp_path: Path):
    path = _node_log(tmp_path)
    runner = CliRunner()
    res = runner.invoke(app, ["ingest", str(path), "--db", str(db_path), "--json"])
    assert res.exit_code == 0, res.output
    totals = json.loads(res.stdout)["totals"]
    assert (totals["events_no_ts"], totals["events_no_node"]) == (3, 3)
    res = runner.invoke(app, ["status", "--db", str(db_path), "--json"])
    unplaced = json.loads(res.stdout)["unplaced"]
    assert (unplaced["no_ts"], unplaced["no_node"]) == (3, 3)
    assert unplaced["files"][0]["file"] == str(path.resolve())

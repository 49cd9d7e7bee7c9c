"""Slurm node lists -> the fleet table: sinfo (text and --json), squeue (text and --json),
scontrol; every line accounted for; the fleet model, rates and replay use what they list; and the
real `sinfo --json` / `squeue --json` of a one-node Slurm."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from faultlens.app.cli import app
from faultlens.ingest.base import ParseContext
from faultlens.ingest.pipeline import ingest_paths
from faultlens.ingest.slurm.fleet_rows import gres_gpus
from faultlens.ingest.slurm.sinfo_json import SlurmListJsonParser
from faultlens.ingest.slurm.squeue import SqueueParser, parse_line
from faultlens.models.fleet import fleet
from tests.integration_helpers import slurm as slurm_helper

MTIME = datetime(2025, 6, 1, 8, 30)  # when the listings were taken (their files' time)
EPOCH = datetime(1970, 1, 1)
REASON_AT = datetime(2025, 6, 1, 7, 55)
runner = CliRunner()


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    stamp = (MTIME - EPOCH).total_seconds()
    os.utime(path, (stamp, stamp))
    return path


def _ingest(store, path: Path):
    (f,) = ingest_paths(store, [str(path)], now=MTIME + timedelta(days=1)).files
    assert f.status in ("ok", "partial"), f.error
    assert f.lines == f.parsed + f.noise + f.quarantined
    return f


def _fleet_rows(store) -> list[tuple]:
    return store.query(
        "SELECT node, partition, gpus, first_seen, last_seen, source, line FROM nodes "
        "ORDER BY node, source"
    ).rows()


SINFO_O = (
    "NODELIST PARTITION STATE GRES REASON\n"  # sinfo -N -o "%N %P %T %G %E"
    "gpu[001-002] gpu* idle gpu:h100:8(S:0-1) none\n"
    "gpu003 gpu* drained gpu:h100:8(S:0-1) Xid 79 fallen off the bus\n"
    "mix01 mixed mix gpu:a100:2,gpu:l40s:2 none\n"
    "cpu01 cpu idle (null) none\n"
    "this line is no sinfo row\n"
)


def test_sinfo_text_rows_become_fleet_rows(store, tmp_path: Path) -> None:
    f = _ingest(store, _write(tmp_path / "sinfo.txt", SINFO_O))
    assert (f.format, f.parsed, f.noise, f.quarantined) == ("sinfo", 4, 1, 1)
    assert _fleet_rows(store) == [
        ("cpu01", "cpu", None, MTIME, MTIME, "sinfo", 5),
        ("gpu001", "gpu", 8, MTIME, MTIME, "sinfo", 2),
        ("gpu002", "gpu", 8, MTIME, MTIME, "sinfo", 2),
        ("gpu003", "gpu", 8, MTIME, MTIME, "sinfo", 3),
        ("mix01", "mixed", 4, MTIME, MTIME, "sinfo", 4),  # two GPU types, summed
    ]
    assert store.query("SELECT line, reason FROM quarantine").rows() == [
        (6, "sinfo row does not fit its header")
    ]
    assert store.query("SELECT node, state FROM nodes ORDER BY node").rows() == [
        ("cpu01", "idle"),
        ("gpu001", "idle"),
        ("gpu002", "idle"),
        ("gpu003", "drained"),
        ("mix01", "mix"),
    ]
    assert store.query("SELECT node, kind, code FROM events").rows() == [
        ("gpu003", "node_drain", 79)
    ]


def test_sinfo_long_listing_is_dated_by_its_snapshot_line(store, tmp_path: Path) -> None:
    snap = datetime(2025, 5, 30, 23, 59, 1)
    text = (
        f"{snap:%a %b %d %H:%M:%S %Y}\n"
        "NODELIST   NODES PARTITION       STATE CPUS    S:C:T MEMORY TMP_DISK WEIGHT AVAIL_FE REASON\n"
        "node[7-8]      1      batch*        idle 16     16:1:1   4000        0      1   (null) none\n"
    )
    f = _ingest(store, _write(tmp_path / "sinfo-Nl.txt", text))
    assert (f.parsed, f.noise, f.quarantined) == (1, 2, 0)
    assert _fleet_rows(store) == [
        ("node7", "batch", None, snap, snap, "sinfo", 3),
        ("node8", "batch", None, snap, snap, "sinfo", 3),
    ]


def test_gres_gpu_counts() -> None:
    assert gres_gpus("gpu:8") == 8
    assert gres_gpus("gpu:h100:8(S:0-1),shard:4") == 8
    assert gres_gpus("gpu:a:2,gpu:b:3") == 5
    assert gres_gpus("shard:4") is None and gres_gpus("(null)") is None and gres_gpus(None) is None


def _sinfo_json_23() -> str:
    def row(names, state, gres, reason="", at=None, part="gpu"):
        return {
            "port": 6818,
            "node": {"state": state},
            "nodes": {"allocated": 0, "idle": len(names), "total": len(names), "nodes": names},
            "partition": {"name": part, "alternate": ""},
            "gres": {"total": gres, "used": ""},
            "reason": {
                "description": reason,
                "user": "root" if reason else "",
                "time": {"set": at is not None, "infinite": False, "number": at or 0},
            },
        }

    at = int((REASON_AT - EPOCH).total_seconds())
    doc = {
        "sinfo": [
            row(["gpu001", "gpu002"], ["IDLE"], "gpu:h100:8(S:0-1)"),
            row(["gpu003"], ["IDLE", "DRAIN"], "gpu:h100:8(S:0-1)", "Xid 79 fell off", at),
            row(["big01"], ["MIXED"], "gpu:b200:4", part="big"),
        ],
        "warnings": [],
        "errors": [],
        "meta": {"slurm": {"version": {"major": "24", "minor": "05", "micro": "4"}}},
    }
    return json.dumps(doc, indent=2) + "\n"


def test_sinfo_json_rows_of_slurm_23_to_25(store, tmp_path: Path) -> None:
    text = _sinfo_json_23()
    f = _ingest(store, _write(tmp_path / "sinfo.json", text))
    n_lines = text.count("\n")
    assert (f.format, f.parsed, f.noise, f.quarantined) == ("sinfo_json", n_lines, 0, 0)
    rows = [r[:6] for r in _fleet_rows(store)]
    assert rows == [
        ("big01", "big", 4, MTIME, MTIME, "sinfo"),
        ("gpu001", "gpu", 8, MTIME, MTIME, "sinfo"),
        ("gpu002", "gpu", 8, MTIME, MTIME, "sinfo"),
        ("gpu003", "gpu", 8, MTIME, MTIME, "sinfo"),
    ]
    assert store.query("SELECT node, state FROM nodes ORDER BY node").rows() == [
        ("big01", "MIXED"),
        ("gpu001", "IDLE"),
        ("gpu002", "IDLE"),
        ("gpu003", "IDLE+DRAIN"),
    ]
    lines = text.splitlines()
    for node, *_, line in _fleet_rows(store):  # each row points at the line naming its node
        assert f'"{node}"' in lines[line - 1]
    assert store.query("SELECT node, kind, code, ts, subkind FROM events").rows() == [
        ("gpu003", "node_drain", 79, REASON_AT, "Xid 79 fell off")
    ]


def test_a_json_document_of_another_shape_is_quarantined_whole(tmp_path: Path) -> None:
    parser = SlurmListJsonParser()
    ctx = ParseContext(file="x.json", mtime=MTIME)
    import polars as pl

    res = parser.parse_chunk(pl.Series(['{"sinfo_like": []', "}"]), 1, ctx, None)
    assert res.parsed == 0 and res.quarantine["line"].to_list() == [1, 2]
    assert "no 'sinfo', 'nodes' or 'jobs' list" in res.quarantine["reason"][0]
    res = parser.parse_chunk(pl.Series(['{"sinfo": [', "}"]), 1, ctx, None)
    assert res.quarantine["reason"][0].startswith("invalid JSON")


SQUEUE = (
    "Sun Jun 01 08:00:00 2025\n"  # squeue -l prints when it ran
    "             JOBID PARTITION     NAME     USER    STATE       TIME TIME_LIMI  NODES NODELIST(REASON)\n"
    "               101       gpu pretrain    alice  RUNNING    1:02:03 2-00:00:00      2 gpu[001-002]\n"
    "               102       gpu     eval      bob  PENDING       0:00   1:00:00      1 (Resources)\n"
    "               103       big    sweep    carol  RUNNING      12:00   4:00:00      1 big01\n"
    "               104       gpu   broken      dan  RUNNING      12:00   4:00:00      1 gpu[003\n"
)


def test_squeue_text_running_jobs_name_fleet_nodes(store, tmp_path: Path) -> None:
    f = _ingest(store, _write(tmp_path / "squeue.txt", SQUEUE))
    assert (f.format, f.parsed, f.noise, f.quarantined) == ("squeue", 3, 2, 1)
    at = datetime(2025, 6, 1, 8, 0)
    assert _fleet_rows(store) == [
        ("big01", "big", None, at, at, "squeue", 5),
        ("gpu001", "gpu", None, at, at, "squeue", 3),
        ("gpu002", "gpu", None, at, at, "squeue", 3),
    ]
    assert store.query("SELECT line, reason FROM quarantine").rows() == [
        (6, "squeue row with an unreadable node list")
    ]


def test_squeue_parse_line_documents_a_row() -> None:
    ctx = ParseContext(file="q", mtime=MTIME)
    cols = SQUEUE.splitlines()[1].split()
    got = parse_line(SQUEUE.splitlines()[2], cols, ctx)
    assert [r["node"] for r in got.rows["nodes"]] == ["gpu001", "gpu002"]
    assert parse_line(SQUEUE.splitlines()[3], cols, ctx).rows == {}  # pending: no node
    assert parse_line("101 gpu", None, ctx).reason == "squeue row without a header line"
    assert SqueueParser().sniff(SQUEUE.splitlines(), "q") > 0


def test_squeue_json_running_jobs(store, tmp_path: Path) -> None:
    start = datetime(2025, 6, 1, 6, 0)
    num = int((start - EPOCH).total_seconds())
    doc = {
        "jobs": [
            {
                "job_id": 7,
                "job_state": ["RUNNING"],
                "nodes": "gpu[010-011]",
                "partition": "gpu",
                "start_time": {"set": True, "infinite": False, "number": num},
            },
            {"job_id": 8, "job_state": ["PENDING"], "nodes": "", "partition": "gpu"},
            {"job_id": 9, "job_state": "RUNNING", "nodes": "gpu012", "partition": "gpu"},
        ],
        "errors": [],
    }
    text = json.dumps(doc, indent=2) + "\n"
    f = _ingest(store, _write(tmp_path / "squeue.json", text))
    assert (f.format, f.parsed, f.quarantined) == ("sinfo_json", text.count("\n"), 0)
    assert [r[:6] for r in _fleet_rows(store)] == [
        ("gpu010", "gpu", None, start, start, "squeue"),
        ("gpu011", "gpu", None, start, start, "squeue"),
        ("gpu012", "gpu", None, MTIME, MTIME, "squeue"),  # 22.05's plain state; no start
    ]


def test_the_fleet_model_rates_and_replay_use_the_listed_nodes(db_path: Path, tmp_path) -> None:
    """Ten 4-GPU nodes listed by sinfo, one of which fails: the fleet is the ten, not the one."""
    from faultlens.ingest.store import Store

    listing = _write(
        tmp_path / "sinfo.txt",
        "NODELIST PARTITION STATE GRES REASON\nn[01-10] gpu idle gpu:4 none\n",
    )
    t0 = MTIME - timedelta(days=3)
    kern = tmp_path / "kern.log"
    kern.write_text(
        "".join(
            f"{t0 + timedelta(days=d):%Y-%m-%dT%H:%M:%S}+00:00 n03 kernel: NVRM: Xid "
            "(PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus.\n"
            for d in (0, 6)
        )
    )
    result = runner.invoke(app, ["ingest", str(listing), str(kern), "--db", str(db_path), "-q"])
    assert result.exit_code == 0, result.output
    with Store(db_path, read_only=True) as store:
        fl = fleet(store)
    assert (fl.nodes, fl.gpus_per_node, fl.source) == (10, 4, "nodes")
    assert fl.node_days == pytest.approx(10 * 6.0, abs=1e-3)  # first to last record
    doc = json.loads(runner.invoke(app, ["reliability", "--db", str(db_path), "--json"]).stdout)
    assert doc["nodes"] == 10 and doc["failures_per_1000_node_days"] == pytest.approx(
        2 * 1000 / (10 * 6.0), abs=1e-3
    )
    args = ["replay", "--db", str(db_path), "--strategy", "checkpoint", "--job-gpus", "8"]
    out = runner.invoke(app, [*args, "--resamples", "2", "--json"])
    assert out.exit_code == 0, out.output
    trace = json.loads(out.stdout)["trace"]
    assert (trace["fleet_nodes"], trace["fleet_gpus"], trace["gpus_per_node"]) == (10, 40, 4)
    assert trace["fleet_source"] == "nodes"


def _no_slurm() -> str | None:
    if os.geteuid() != 0:
        return "needs root (slurmd and munged run as root here)"
    missing = slurm_helper.missing_binaries()
    return f"missing {', '.join(missing)}" if missing else None


@pytest.mark.skipif(_no_slurm() is not None, reason=str(_no_slurm()))
def test_real_sinfo_and_squeue_json_of_a_one_node_slurm(store, tmp_path: Path) -> None:
    root = Path(tempfile.mkdtemp(prefix="flfleet-", dir="/tmp"))  # short: unix socket paths
    s = slurm_helper.start(root)
    try:
        job = s.sbatch("--wrap", "sleep 120", "-N1", "-p", "gpu")
        slurm_helper.wait_for("the job to run", lambda: s.squeue_state(job) == "RUNNING", 60)
        outputs = {
            "sinfo.json": s.run("sinfo", "--json").stdout,
            "squeue.json": s.run("squeue", "--json").stdout,
            "sinfo-Nl.txt": s.run("sinfo", "-N", "-l").stdout,
            "squeue.txt": s.run("squeue").stdout,
            "scontrol.txt": s.run("scontrol", "show", "node").stdout,
        }
        s.run("scancel", job, check=False)
    finally:
        s.stop_all()
        shutil.rmtree(root, ignore_errors=True)
    for name, text in outputs.items():
        f = _ingest(store, _write(tmp_path / name, text))
        assert f.quarantined == 0 and f.parsed > 0, (name, f)
        assert f.noise <= 2, (name, f)  # at most a header and sinfo -l's time line
    sources = store.query(
        "SELECT source, count(*) AS n FROM nodes WHERE node = ? AND partition = 'gpu' "
        "GROUP BY source ORDER BY source",
        [slurm_helper.NODE],
    ).rows()
    assert sources == [("scontrol", 1), ("sinfo", 2), ("squeue", 2)]
    assert store.scalar("SELECT count(DISTINCT node) FROM nodes") == 1

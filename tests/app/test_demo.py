"""`faultlens demo` and `faultlens synth` end to end: generate, ingest, match the truth."""

from __future__ import annotations

import csv
import gzip
import json
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from faultlens.app.cli import app
from faultlens.ingest.store import Store

RATE = 150.0  # failures per 1000 node-days: enough failures in 16 nodes x 7 days to check
NODES, DAYS = 16, 7
NOT_LOGS = {"ground_truth.json", "topology.csv"}  # synth outputs the demo does not ingest


def _raw_logs(out: Path) -> list[Path]:
    return sorted(p for p in out.rglob("*") if p.is_file() and p.name not in NOT_LOGS)


def _line_count(path: Path) -> int:
    """Lines end at ``\\n`` only (a progress bar's bare ``\\r`` stays inside its line)."""
    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def _sacct_states(sacct: Path) -> dict[str, int]:
    """Job records (not steps) by state, read from the raw ``sacct -P`` file."""
    with sacct.open(newline="") as f:
        rows = list(csv.DictReader(f, delimiter="|"))
    states = [r["State"].split(" ", 1)[0] for r in rows if "." not in r["JobID"]]
    return dict(Counter(states))


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("demo")
    out, db = tmp / "out", tmp / "demo.duckdb"
    args = [
        "demo",
        "--nodes",
        "16",
        "--days",
        "7",
        "--seed",
        "3",
        "--rate",
        str(RATE),
        "--out",
        str(out),
        "--db",
        str(db),
    ]
    assert args[1:5] == ["--nodes", str(NODES), "--days", str(DAYS)]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    truth = json.loads((out / "ground_truth.json").read_text())
    return args, out, db, doc, truth


def _sacct_job_ids(sacct: Path) -> list[str]:
    with sacct.open(newline="") as f:
        return [r["JobID"] for r in csv.DictReader(f, delimiter="|") if "." not in r["JobID"]]


def store_jobs(db: Path) -> int:
    with Store(db, read_only=True) as store:
        return store.scalar("SELECT count(DISTINCT job_id) FROM jobs")


def test_demo_ingests_everything_cleanly(demo_run) -> None:
    _, out, db, doc, truth = demo_run
    totals = doc["ingest"]
    raw = _raw_logs(out)
    assert len(raw) >= NODES + 2  # kern.log per node, sacct, slurmctld, job logs, telemetry
    assert totals["files"] == len(raw)
    assert totals["lines"] == sum(_line_count(p) for p in raw)
    assert totals["failed"] == 0
    assert totals["quarantined"] == 0  # every synthetic line is parsed or noise
    assert totals["lines"] == totals["parsed"] + totals["noise"]
    assert doc["db"] == str(db) and Path(doc["out"]) == out


def test_demo_summary_matches_ground_truth(demo_run) -> None:
    _, out, db, doc, truth = demo_run
    s = doc["summary"]
    assert len(truth["failures"]) > 5 and len(truth["interruptions"]) > 0
    assert s["interruptions_found_in_db"] == len(truth["interruptions"])
    assert s["truth"]["node_days"] == NODES * DAYS
    rate = len(truth["failures"]) * 1000 / (NODES * DAYS)
    assert s["truth"]["failures_per_1000_node_days"] == pytest.approx(rate, rel=1e-6)
    in_db = {r["state"]: r["records"] for r in s["jobs_by_state"]}
    assert in_db == _sacct_states(out / "slurm" / "sacct.txt")
    assert in_db == truth["jobs_by_state"]
    assert store_jobs(db) == len(set(_sacct_job_ids(out / "slurm" / "sacct.txt")))
    kinds = {(r["source"], r["kind"]) for r in s["events_by_kind"]}
    assert ("kernel", "xid") in kinds and ("slurm", "node_drain") in kinds


def test_each_gpu_failure_is_in_the_database(demo_run) -> None:
    """Every failure whose evidence is an Xid is ingested on its node and GPU at its time."""
    _, _, db, _, truth = demo_run
    expected = {
        "Faulty GPU": (79, 74, 149),
        "GPU HBM3 Memory": (95, 48),
        "GPU SRAM Memory": (95,),
        "GPU System Processor": (119,),
        "GPU Thermal Interface + Sensor": (79,),
    }
    checked = 0
    with Store(db, read_only=True) as store:
        for f in truth["failures"]:
            codes = expected.get(f["cause"])
            if codes is None:
                continue
            ts = datetime.fromisoformat(f["ts"])
            n = store.scalar(
                "SELECT count(*) FROM events WHERE source = 'kernel' AND node = ? AND gpu = ? "
                "AND code IN (SELECT unnest(?::INTEGER[])) AND ts BETWEEN ? AND ?",
                [
                    f["node"],
                    f["gpu"],
                    list(codes),
                    ts - timedelta(seconds=2),
                    ts + timedelta(seconds=5),
                ],
            )
            assert n >= 1, f
            checked += 1
    assert checked >= 3


def test_demo_text_output_and_rerun(demo_run) -> None:
    args, out, db, _, _ = demo_run
    small = [
        "demo",
        "--nodes",
        "6",
        "--days",
        "2",
        "--seed",
        "4",
        "--rate",
        str(RATE),
        "--out",
        str(out),
        "--db",
        str(db),
    ]
    result = CliRunner().invoke(app, small)  # same folder and database: both rebuilt
    assert result.exit_code == 0, result.output
    truth = json.loads((out / "ground_truth.json").read_text())
    n = len(truth["failures"])
    rate = n * 1000 / (6 * 2)
    text = result.stdout
    assert f"ground truth: {n} failures over 12 node-days = {rate:.2f} failures" in text
    assert "top Xids" in text and "jobs by state" in text and "0 quarantined" in text
    assert sorted(p.name for p in (out / "nodes").iterdir()) == [f"gpu{i:04d}" for i in range(1, 7)]
    with Store(db, read_only=True) as store:  # only the second run's data
        assert store.count("jobs") == sum(truth["jobs_by_state"].values())
        assert store.scalar("SELECT count(DISTINCT node) FROM events WHERE source = 'kernel'") <= 6


def test_demo_refuses_a_database_with_other_files(tmp_path: Path) -> None:
    db = tmp_path / "real.duckdb"
    log = tmp_path / "kern.log"
    log.write_text("kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n")
    ingest = CliRunner().invoke(app, ["ingest", "--format", "kernel", str(log), "--db", str(db)])
    assert ingest.exit_code == 0, ingest.output
    result = CliRunner().invoke(
        app,
        ["demo", "--nodes", "2", "--days", "0.5", "--out", str(tmp_path / "out"), "--db", str(db)],
    )
    assert result.exit_code == 2
    assert "not demo output" in result.output
    with Store(db, read_only=True) as store:
        assert store.count("ingested_files") > 0  # left alone


def test_synth_json_contract(tmp_path: Path) -> None:
    out = tmp_path / "s"
    result = CliRunner().invoke(
        app, ["synth", "--nodes", "4", "--days", "1", "--seed", "9", "--out", str(out), "--json"]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert set(doc) == {"out", "files", "ground_truth"}
    assert doc["ground_truth"] == str(out / "ground_truth.json")
    assert str(out / "nodes" / "gpu0001" / "kern.log") in doc["files"]
    assert str(out / "slurm" / "sacct.txt") in doc["files"]
    truth = json.loads(Path(doc["ground_truth"]).read_text())
    assert truth["config"]["seed"] == 9 and truth["config"]["n_nodes"] == 4
    assert isinstance(truth["stragglers"], list)

"""`faultlens demo` and `faultlens synth` end to end: generate, ingest, match the truth."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from faultlens.app.cli import app
from faultlens.ingest.store import Store

RATE = 150.0  # failures per 1000 node-days: enough failures in 16 nodes x 7 days to check


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
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    truth = json.loads((out / "ground_truth.json").read_text())
    return args, out, db, doc, truth


def test_demo_ingests_everything_cleanly(demo_run) -> None:
    _, out, db, doc, truth = demo_run
    totals = doc["ingest"]
    assert totals["failed"] == 0
    assert totals["quarantined"] == 0  # every synthetic line is parsed or noise
    assert totals["lines"] == totals["parsed"] + totals["noise"]
    assert totals["files"] >= 16 + 2  # kern.log per node, sacct, slurmctld, job logs, telemetry
    assert doc["db"] == str(db) and Path(doc["out"]) == out


def test_demo_summary_matches_ground_truth(demo_run) -> None:
    _, _, db, doc, truth = demo_run
    s = doc["summary"]
    assert s["truth"]["failures"] == len(truth["failures"]) > 5
    assert s["truth"]["interruptions"] == len(truth["interruptions"]) > 0
    assert s["interruptions_found_in_db"] == len(truth["interruptions"])
    assert s["truth"]["node_days"] == 16 * 7
    assert s["truth"]["lemon_nodes"] == truth["lemon_nodes"]
    in_db = {r["state"]: r["records"] for r in s["jobs_by_state"]}
    assert in_db == truth["jobs_by_state"]
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
    rate = truth["summary"]["failures_per_1000_node_days"]
    text = result.stdout
    assert f"ground truth: {n} failures over 12 node-days = {rate:.2f} failures" in text
    assert "top Xids" in text and "jobs by state" in text and "0 quarantined" in text
    assert sorted(p.name for p in (out / "nodes").iterdir()) == [f"gpu{i:04d}" for i in range(1, 7)]
    with Store(db, read_only=True) as store:  # only the second run's data
        assert store.count("jobs") == sum(truth["jobs_by_state"].values())
        assert store.scalar("SELECT count(DISTINCT node) FROM events WHERE source = 'kernel'") <= 6


def test_demo_refuses_a_database_with_other_files(tmp_path: Path, corpus: Path) -> None:
    db = tmp_path / "real.duckdb"
    ingest = CliRunner().invoke(app, ["ingest", str(corpus / "xid"), "--db", str(db), "--json"])
    assert ingest.exit_code in (0, 3)
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

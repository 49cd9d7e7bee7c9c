"""The straggler generator: training logs, Prometheus telemetry exports, ground truth."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from faultlens.ingest.base import ParseContext
from faultlens.ingest.reader import iter_chunks
from faultlens.ingest.training.parser import PARSERS
from faultlens.synth import training as st

START = datetime(2025, 3, 1)


def job(job_id: str, nodes: list[str], hours: float) -> dict:
    return {
        "job_id": job_id,
        "nodes": nodes,
        "n_gpus": 8 * len(nodes),
        "start": START,
        "end": START + timedelta(hours=hours),
    }


def run(tmp_path: Path, jobs: list[dict], seed: int = 5, **opts) -> list[dict]:
    config = {"extra": {"stragglers": {"straggler_job_p": 1.0, **opts}}}
    return st.write(jobs, [], np.random.default_rng(seed), tmp_path, config)


def test_eligible_jobs_only(tmp_path: Path) -> None:
    jobs = [
        job("1", ["gpu0001"], 4),
        job("2", ["gpu0001", "gpu0002"], 0.5),
        job("3", ["gpu0001", "gpu0002", "gpu0003"], 3),
    ]
    truth = run(tmp_path, jobs)
    written = sorted(p.name for p in (tmp_path / "jobs").iterdir())
    assert written == ["3"]  # one node, or shorter than min_hours: not written
    assert {t["job_id"] for t in truth} == {"3"}


def test_ground_truth_rows(tmp_path: Path) -> None:
    jobs = [job(str(i), [f"gpu{4 * i + k:04d}" for k in range(4)], 3) for i in range(6)]
    truth = run(tmp_path, jobs)
    assert truth, "every job was asked to straggle"
    for t in truth:
        assert set(t) >= {"job_id", "node", "gpu", "cause", "slowdown", "wasted_gpu_h"}
        assert t["cause"] in st.CAUSES
        assert (t["gpu"] is None) == (t["cause"] in st.NODE_LEVEL)
        assert t["node"] in jobs[int(t["job_id"])]["nodes"]
        assert 1.1 < t["slowdown"] < 1.9
        # Waste is bounded by the job's GPU-hours while straggling at this slowdown.
        onset, end = datetime.fromisoformat(t["onset"]), datetime.fromisoformat(t["end"])
        bound = 32 * (end - onset).total_seconds() / 3600 * (1 - 1 / t["slowdown"])
        assert 0 < t["wasted_gpu_h"] <= bound * 1.001


def test_prometheus_export_shape(tmp_path: Path) -> None:
    run(tmp_path, [job("7", ["gpu0001", "gpu0002", "gpu0003"], 2)])
    doc = json.loads((tmp_path / "jobs" / "7" / "telemetry.json").read_text())
    assert doc["status"] == "success" and doc["data"]["resultType"] == "matrix"
    series = doc["data"]["result"]
    names = {s["metric"]["__name__"] for s in series}
    assert {
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        "DCGM_FI_PROF_PCIE_TX_BYTES",
    } <= names
    clock = [s for s in series if s["metric"]["__name__"] == "DCGM_FI_DEV_SM_CLOCK"]
    assert len(clock) == 24  # 3 nodes x 8 GPUs
    m = clock[0]["metric"]
    assert m["Hostname"] == "gpu0001" and m["gpu"] == "0"
    assert m["pci_bus_id"].startswith("00000000:") and m["UUID"].startswith("GPU-")
    ts, value = clock[0]["values"][0]
    assert ts == pytest.approx((START - datetime(1970, 1, 1)).total_seconds())
    assert isinstance(value, str) and 1800 < float(value) < 2100
    # One series per line: no line near the reader's 1 MB line limit.
    assert max(len(x) for x in (tmp_path / "jobs" / "7" / "telemetry.json").open()) < 100_000


def test_train_log_parses_and_slows_down(tmp_path: Path) -> None:
    jobs = [job(str(i), [f"gpu{3 * i + k:04d}" for k in range(3)], 3) for i in range(8)]
    truth = run(tmp_path, jobs, second_straggler_p=0.0)
    parser = PARSERS[0]
    frameworks = set()
    for t in truth:
        path = tmp_path / "jobs" / t["job_id"] / "train.log"
        ctx = ParseContext(file=str(path))
        state = parser.new_state(ctx)
        steps = pl.concat(
            [
                parser.parse_chunk(c.lines, c.first_line, ctx, state).tables["train_steps"]
                for c in iter_chunks(str(path))
            ]
        )
        frameworks |= set(steps["framework"].unique().to_list())
        assert steps["job_id"].unique().to_list() == [t["job_id"]]
        onset, end = datetime.fromisoformat(t["onset"]), datetime.fromisoformat(t["end"])
        timed = steps.filter(pl.col("step_time_s").is_not_null())
        before = timed.filter(pl.col("ts") < onset - timedelta(minutes=5))["step_time_s"].median()
        during = timed.filter((pl.col("ts") > onset + timedelta(minutes=5)) & (pl.col("ts") < end))[
            "step_time_s"
        ].median()
        assert during / before == pytest.approx(t["slowdown"], rel=0.05)
    assert len(frameworks) >= 2


def test_same_seed_same_bytes(tmp_path: Path) -> None:
    jobs = [job("1", ["gpu0001", "gpu0002", "gpu0003"], 2)]
    a = run(tmp_path / "a", jobs, seed=11)
    b = run(tmp_path / "b", jobs, seed=11)
    assert a == b
    for name in ("train.log", "telemetry.json"):
        assert (tmp_path / "a/jobs/1" / name).read_bytes() == (
            tmp_path / "b/jobs/1" / name
        ).read_bytes()


def test_accepts_cluster_dataclasses(tmp_path: Path) -> None:
    from faultlens.synth.cluster import Job

    j = Job(
        job_id="9",
        name="pretrain",
        user="alice",
        uid=1001,
        account="llm",
        partition="gpu",
        nodes=["gpu0001", "gpu0002", "gpu0003"],
        n_gpus=24,
        submit_s=0.0,
        start_s=0.0,
        end_s=3 * 3600.0,
        state="COMPLETED",
        exit_code="0:0",
        time_limit_s=4 * 3600.0,
        origin=START,
    )
    run(tmp_path, [j])
    assert (tmp_path / "jobs" / "9" / "train.log").stat().st_size > 0

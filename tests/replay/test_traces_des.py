"""Trace sources (database, ground truth, public traces), resampling, and the SimPy cross-check."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from faultlens.replay.des import simulate
from faultlens.replay.generate import block_bootstrap, fit_to_job, llama3_trace, poisson_trace
from faultlens.replay.model import JobSpec
from faultlens.replay.score import evaluate
from faultlens.replay.strategies import resolve
from faultlens.replay.traces import acme_rates, alibaba2023_trace, from_db, from_ground_truth

DATA = Path(__file__).resolve().parents[1] / "data" / "replay"
T0 = datetime(2024, 5, 1)


def at(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


@pytest.fixture
def cluster(store):
    store.insert(
        "events",
        pl.DataFrame(
            {
                "ts": [at(0), at(1), at(1.01), at(5), at(9), at(30), at(40), at(40.001), at(48)],
                "node": ["n1", "n1", "n1", "n2", "n3", "n1", "n4", "n5", "n5"],
                "kind": [
                    "diag",
                    "ecc",
                    "xid",
                    "xid",
                    "nccl_timeout",
                    "node_down",
                    "nccl_timeout",
                    "nccl_timeout",
                    "diag",
                ],
                "code": [None, None, 79, 48, None, None, None, None, None],
                "job_id": [None, None, None, None, "j1", None, "j2", "j2", None],
            }
        ),
    )
    store.insert(
        "predictions",
        pl.DataFrame(
            {
                "made_at": [at(2), at(20)],
                "node": ["n2", "n9"],
                "target": ["failure"] * 2,
                "horizon": [24.0, 24.0],
                "score": [0.9, 0.8],
            }
        ),
    )
    store.insert(
        "attributions",
        pl.DataFrame(
            {
                "job_id": ["j7"],
                "end": [at(30.05)],
                "node": ["n1"],
                "cause": ["gpu_hardware"],
            }
        ),
    )
    return store


def test_trace_from_database(cluster):
    tr = from_db(cluster)
    # Xid 79 (the ECC 36 s before is no warning), Xid 48 (predicted 3 h ahead), NCCL j1,
    # node_down + its attribution (one), NCCL j2 on two nodes (one)
    assert tr.t_h.tolist() == pytest.approx([1.01, 5.0, 9.0, 30.0, 40.0])
    assert tr.hardware.tolist() == [True, True, False, True, False]
    assert tr.predicted.tolist() == [False, True, False, False, False]
    assert not tr.warned.any()
    assert tr.false_alarm_h.tolist() == pytest.approx([20.0])  # n9 never failed
    assert tr.fleet_nodes == 5 and tr.span_h == pytest.approx(48 + 1 / 3600)
    warned = from_db(cluster, min_lead_min=0.1)
    assert warned.warned.tolist()[0] is True


def test_trace_from_ground_truth():
    tr = from_ground_truth(DATA / "ground_truth_small.json")
    # the 03:32 interruption is the 03:30 failure; the software failure is not hardware
    assert tr.t_h.tolist() == pytest.approx([3.5, 20.0, 30.0])
    assert tr.hardware.tolist() == [True, False, False]
    assert tr.warned.tolist() == [True, False, False]
    assert (tr.fleet_nodes, tr.span_h) == (4, 48.0)


def test_public_traces(corpus):
    rates = acme_rates(corpus / "traces" / "acmetrace-cluster_summary.csv")
    seren = rates.filter(pl.col("cluster") == "Seren").row(0, named=True)
    assert seren["failed_gpu_jobs"] == pytest.approx(663813 * 0.429)
    assert seren["gpu_hours"] == pytest.approx((4560592618 + 14274584510 + 2675447459) / 3600)
    ali = alibaba2023_trace(
        corpus / "traces" / "alibaba-gpu-v2023-openb_pod_list_default.csv",
        corpus / "traces" / "alibaba-gpu-v2023-openb_node_list_gpu_node.csv",
    )
    assert ali.fleet_nodes == 1213 and ali.n_events == 1869
    acc = evaluate(resolve("checkpoint"), fit_to_job(ali, JobSpec(gpus=64)), JobSpec(gpus=64))
    assert 0 < acc["productive"] < ali.span_h


def test_block_bootstrap_and_job_fit():
    tr = llama3_trace(seed=2)
    rs = block_bootstrap(tr, np.random.default_rng(0))
    assert rs.span_h == tr.span_h and np.all(np.diff(rs.t_h) >= 0)
    assert 0.6 * tr.n_events < rs.n_events < 1.4 * tr.n_events
    half = fit_to_job(tr, JobSpec(gpus=8192))
    assert half.fleet_nodes == 1024 and 0.4 < half.n_events / tr.n_events < 0.6
    double = fit_to_job(tr, JobSpec(gpus=32768))
    assert double.n_events == 2 * tr.n_events


@pytest.mark.parametrize(
    "name",
    [
        "checkpoint",
        "young-daly",
        "in-memory",
        "hot-spares",
        "elastic",
        "live-migration",
        "predictive-drain",
        "hot-spares+in-memory",
        "elastic+in-memory+predictive-drain",
    ],
)
def test_simpy_baseline_agrees(name):
    tr = poisson_trace(
        3.0,
        60,
        4,
        seed=5,
        hardware_frac=0.7,
        warned_frac=0.2,
        predicted_frac=0.3,
        false_alarms_per_h=0.3,
    )
    job = JobSpec(
        gpus=32,
        checkpoint_async=True,
        interval_min=7,
        repair_h=3,
        replacement="pool",
        spares=2,
        restart_s=400,
        buddy_window_s=3600,
    )
    fast, slow = evaluate(resolve(name), tr, job), simulate(resolve(name), tr, job)
    for key, value in fast.items():
        assert slow[key] == pytest.approx(value, abs=1e-9), key


def test_cli_replay_json_and_no_data(cluster, db_path, tmp_path):
    import typer

    from faultlens.app import cmd_replay

    app = typer.Typer()
    app.callback()(lambda: None)
    cmd_replay.register(app)
    cluster.close()
    runner = CliRunner()
    res = runner.invoke(
        app,
        [
            "replay",
            "--db",
            str(db_path),
            "--json",
            "--resamples",
            "5",
            "--strategy",
            "checkpoint,hot-spares+in-memory",
            "--sweep",
            "interval_min=10:60:3",
        ],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert [s["name"] for s in doc["strategies"]] == ["checkpoint"] * 3 + [
        "hot-spares+in-memory"
    ] * 3
    first = doc["strategies"][0]
    assert set(first) >= {
        "name",
        "params",
        "ettr",
        "goodput_gpu_h",
        "badput_gpu_h",
        "restarts",
        "cost_usd",
        "ettr_ci",
    }
    assert first["params"]["sweep"] == {"interval_min": 10.0}
    assert first["ettr_ci"][0] <= first["ettr_ci"][1]
    empty = tmp_path / "empty.duckdb"
    from faultlens.ingest.store import Store

    Store(empty).close()
    res = runner.invoke(app, ["replay", "--db", str(empty), "--json"])
    assert res.exit_code == 5
    assert "no interruptions" in res.output

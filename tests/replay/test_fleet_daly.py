"""The issue's Done-when check: a year of Poisson Xid 79 failures on a 2,048-node job (job MTBF
6 h), written as kernel logs and fed through ingest, replayed with the fleet given, finds Daly's
optimum; without the fleet the output says it was inferred from the failing nodes."""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from faultlens.app.cli import app
from faultlens.replay.model import daly_ettr, daly_interval

NODES = 2048
GPUS = 16_384
MTBF_H = 6.0
DAYS = 365
WRITE_S = 300.0
RESTART_S = 600.0
T0 = datetime(2025, 1, 1)
SEED = 11
runner = CliRunner()


def _write_trace(folder: Path) -> int:
    """A Poisson process at 1 / MTBF on uniformly random nodes, one syslog line per failure."""
    rng = np.random.default_rng(SEED)
    n = rng.poisson(DAYS * 24 / MTBF_H)
    t_h = np.sort(rng.uniform(0, DAYS * 24, n))
    nodes = rng.integers(0, NODES, n)
    lines = []
    for t, node in zip(t_h, nodes, strict=True):
        ts = (T0 + timedelta(hours=float(t))).strftime("%Y-%m-%dT%H:%M:%S.%f+00:00")
        lines.append(
            f"{ts} gpu{node:04d} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, "
            "name=python, GPU has fallen off the bus."
        )
    (folder / "kern.log").write_text("\n".join(lines) + "\n")
    return n


@pytest.fixture(scope="module")
def xid_db(tmp_path_factory) -> tuple[Path, int]:
    folder = tmp_path_factory.mktemp("xid79")
    n = _write_trace(folder)
    db = folder / "x.duckdb"
    result = runner.invoke(app, ["ingest", str(folder / "kern.log"), "--db", str(db), "-q"])
    assert result.exit_code == 0, result.output
    return db, n


def _replay(db: Path, *extra: str) -> tuple[dict, str]:
    args = [
        "replay", "--db", str(db), "--strategy", "checkpoint",
        "--sweep", "interval_min=10:180:35", "--job-gpus", str(GPUS),
        "--checkpoint-write-s", str(WRITE_S), "--restart-s", str(RESTART_S),
        "--resamples", "5", "--json", *extra,
    ]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), result.stderr


def test_the_fleet_given_puts_the_optimum_at_dalys(xid_db) -> None:
    db, n = xid_db
    doc, _ = _replay(db, "--fleet-gpus", str(GPUS))
    trace = doc["trace"]
    assert trace["fleet_nodes"] == NODES and trace["fleet_gpus"] == GPUS
    assert trace["fleet_source"] == "override"
    mtbf_h = trace["window_h"] / trace["interruptions"]
    assert trace["interruptions"] == pytest.approx(n, abs=5)  # one interruption per failure
    assert all(s["restarts"] <= trace["interruptions"] for s in doc["strategies"])  # not twice
    tau_min = daly_interval(WRITE_S / 3600, MTBF_H) * 60
    assert tau_min == pytest.approx(57, abs=1)  # the figure, from the formula
    (best,) = doc["best"]
    assert (best["name"], best["param"]) == ("checkpoint", "interval_min")
    assert best["value"] == pytest.approx(tau_min, rel=0.10)
    want = daly_ettr(tau_min / 60, WRITE_S / 3600, RESTART_S / 3600, mtbf_h)
    assert best["ettr"] == pytest.approx(want, abs=0.01)
    assert math.isclose(want, 0.82, abs_tol=0.01)
    # every swept point follows Daly's curve, not only the optimum
    for s in doc["strategies"]:
        tau_h = s["params"]["sweep"]["interval_min"] / 60
        assert s["ettr"] == pytest.approx(
            daly_ettr(tau_h, WRITE_S / 3600, RESTART_S / 3600, mtbf_h), abs=0.012
        )


def test_without_the_fleet_it_says_it_was_inferred(xid_db) -> None:
    db, _ = xid_db
    doc, stderr = _replay(db)
    assert doc["trace"]["fleet_source"] == "failing_nodes"
    assert doc["trace"]["fleet_nodes"] < NODES
    assert "inferred from failing nodes" in stderr
    assert "inferred from failing nodes" in doc["trace"]["fleet_note"]

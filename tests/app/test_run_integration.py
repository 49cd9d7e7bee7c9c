"""`faultlens run` against a real Alertmanager and a real node_exporter on loopback.

Both daemons come from Debian (`prometheus-alertmanager`, `prometheus-node-exporter`). In CI
(CI=true) a missing binary is a failure; on a workstation the tests are skipped with a reason.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import requests
from typer.testing import CliRunner

from faultlens.app.cli import app
from faultlens.ingest.store import Store
from faultlens.models.predictor import TrainConfig, predict_failures, train_failure_model
from faultlens.models.registry import save_model
from tests.models.synthetic import random_cluster

pytestmark = pytest.mark.integration

ALERTMANAGER = "/usr/bin/prometheus-alertmanager"
NODE_EXPORTER = "/usr/bin/prometheus-node-exporter"
AM_CONFIG = 'route:\n  receiver: "null"\nreceivers:\n  - name: "null"\n'


def _binary(path: str) -> str:
    found = path if os.access(path, os.X_OK) else shutil.which(Path(path).name)
    if found:
        return found
    if os.environ.get("CI") == "true":
        pytest.fail(f"{path} is missing (apt-get install {Path(path).name})")
    pytest.skip(f"{path} not installed (apt-get install {Path(path).name})")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_ready(url: str, proc: subprocess.Popen, deadline_s: float = 30.0) -> None:
    """Poll ``url`` until it answers 200, the process dies, or the deadline passes."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}")
        try:
            if requests.get(url, timeout=1).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)  # poll interval, bounded by the deadline
    raise TimeoutError(f"{url} not ready after {deadline_s}s")


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator:
    procs: list[subprocess.Popen] = []

    def start(args: list[str], ready_url: str) -> None:
        log = open(tmp_path / f"{Path(args[0]).name}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        procs.append(proc)
        _wait_ready(ready_url, proc)

    yield start
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture
def alertmanager(tmp_path: Path, daemon) -> str:
    binary = _binary(ALERTMANAGER)
    cfg = tmp_path / "alertmanager.yml"
    cfg.write_text(AM_CONFIG)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    daemon(
        [
            binary,
            f"--config.file={cfg}",
            f"--storage.path={tmp_path / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        f"{url}/-/ready",
    )
    return url


@pytest.fixture
def node_exporter(tmp_path: Path, daemon) -> tuple[str, Path]:
    binary = _binary(NODE_EXPORTER)
    textdir = tmp_path / "textfile"
    textdir.mkdir()
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    daemon(
        [
            binary,
            f"--web.listen-address=127.0.0.1:{port}",
            f"--collector.textfile.directory={textdir}",
            "--collector.disable-defaults",
            "--collector.textfile",
        ],
        f"{url}/metrics",
    )
    return url, textdir


@pytest.fixture
def trained_db(tmp_path: Path):
    """A small cluster, a trained model, and a time at which some nodes are at risk."""
    db = tmp_path / "f.duckdb"
    with Store(db) as store:
        truth = random_cluster(store, n_nodes=40, days=40, seed=21)
        result = train_failure_model(store, as_of=truth["end"], cfg=TrainConfig())
        save_model(tmp_path / "models", result.estimator, result.card)
        t_lo = result.split.test[0]
        for ts, _node, _gpu in sorted(truth["failures"]):
            if ts < t_lo:
                continue
            as_of = (ts - timedelta(hours=1)).replace(minute=0, second=0, microsecond=0)
            pred = predict_failures(store, result.estimator, result.card, as_of=as_of)
            if pred.alerts:
                return db, as_of, truth["end"] + timedelta(days=60)
    pytest.fail("no failure in the test window raised an alert")


def _run(config: Path, as_of) -> tuple[int, list[dict]]:
    res = CliRunner().invoke(app, ["run", "--config", str(config), "--as-of", as_of.isoformat()])
    lines = [json.loads(x) for x in res.stdout.splitlines() if x.startswith("{")]
    assert res.exit_code in (0, 4), (res.exit_code, res.stdout, res.stderr)
    return res.exit_code, lines


def test_run_twice_alerts_once_then_resolves(
    tmp_path, alertmanager, node_exporter, trained_db
) -> None:
    db, as_of, quiet_time = trained_db
    ne_url, textdir = node_exporter
    config = tmp_path / "faultlens.toml"
    config.write_text(
        f'[faultlens]\ndb = "{db}"\nmodels_dir = "{tmp_path / "models"}"\n'
        f'[prometheus]\ntextfile = "{textdir / "faultlens.prom"}"\n'
        f'[alertmanager]\nurl = "{alertmanager}"\nmin_action = "watch"\n'
    )
    code1, out1 = _run(config, as_of)
    code2, out2 = _run(config, as_of)
    alerts = [x for x in out1 if x["type"] == "alert"]
    first, second = out1[-1], out2[-1]
    # The cluster's logs ended in 2025 and the run's clock is today's: the kernel source is
    # quiet on every node, which is an alert of its own and needs a human on every run.
    stopped = [x for x in out1 if x["type"] == "logs_stopped"]
    assert [(x["node"], x["source"]) for x in stopped] == [(None, "kernel")]
    assert alerts and first["sent"]["new"] == len(alerts) + 1
    unchanged = len(alerts) + 1
    assert second["sent"] == {"new": 0, "refreshed": 0, "resolved": 0, "unchanged": unchanged}
    assert code1 == code2 == 4 and first["run_id"] == second["run_id"]
    assert second["needs_human"] == ["logs stopped: kernel"]

    shown = requests.get(f"{alertmanager}/api/v2/alerts", timeout=5).json()
    ours = [a for a in shown if a["labels"].get("alertname") == "FaultlensFailureRisk"]
    assert sorted(a["labels"]["node"] for a in ours) == sorted(a["node"] for a in alerts)
    by_node = {a["labels"]["node"]: a for a in ours}
    for a in alerts:
        got = by_node[a["node"]]
        assert got["labels"]["source"] == "faultlens"
        assert got["labels"].get("gpu") == (str(a["gpu"]) if a["gpu"] is not None else None)
        assert got["annotations"]["score"] == f"{a['score']:.4f}"
        assert got["status"]["state"] == "active"
        assert got["generatorURL"] == f"http://127.0.0.1:8501/node?node={a['node']}"
        assert got["annotations"]["runbook_url"].startswith("https://docs.nvidia.com/")
        assert "state=down" not in got["annotations"]["command"]
        assert got["annotations"]["description"] == "why: " + "; ".join(a["reasons"])
    quiet = [a for a in shown if a["labels"].get("alertname") == "FaultlensLogsStopped"]
    assert [a["labels"]["source_kind"] for a in quiet] == ["kernel"]

    metrics = requests.get(f"{ne_url}/metrics", timeout=5).text
    top = alerts[0]
    assert "node_textfile_scrape_error 0" in metrics
    # node_exporter gives the node-level series (no gpu label in our file) gpu="".
    series = [
        m
        for m in metrics.splitlines()
        if m.startswith("faultlens_risk_score{")
        and f'node="{top["node"]}"' in m
        and ('gpu=""' in m or "gpu=" not in m)
    ]
    assert len(series) == 1, [m for m in metrics.splitlines() if top["node"] in m][:5]
    assert float(series[0].rsplit(" ", 1)[1]) == pytest.approx(top["score"], abs=1e-4)
    with Store(db, read_only=True) as store:
        newest = store.scalar("SELECT max(ts) FROM events WHERE node = ?", [top["node"]])
    seen = [
        m
        for m in metrics.splitlines()
        if m.startswith("faultlens_source_last_seen_timestamp_seconds{")
        and f'node="{top["node"]}"' in m
    ]
    assert len(seen) == 1 and 'source="kernel"' in seen[0]
    epoch_s = (newest - datetime(1970, 1, 1)).total_seconds()
    assert float(seen[0].rsplit(" ", 1)[1]) == pytest.approx(epoch_s, abs=1)

    _, out3 = _run(config, quiet_time)  # long after the last event: the risk has dropped
    assert out3[-1]["sent"]["resolved"] == len(alerts) and out3[-1]["paged"] == 0
    shown = requests.get(f"{alertmanager}/api/v2/alerts", timeout=5).json()
    assert [a for a in shown if a["labels"].get("alertname") == "FaultlensFailureRisk"] == []

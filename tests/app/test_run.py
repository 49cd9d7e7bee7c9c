"""The scheduled job's parts: alert reconciliation, the textfile, the lock, the config."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from faultlens.app.alerts import reconcile, textfile_lines, write_textfile
from faultlens.app.run import load_config, run_lock
from faultlens.ingest.errors import ConfigError, LockedError

NOW = datetime(2025, 5, 1, 12, 0)
TTL, REFRESH = timedelta(hours=4), timedelta(hours=2)
A = (
    {"alertname": "FaultlensFailureRisk", "node": "gpu001", "severity": "critical"},
    {"score": "0.97"},
)
B = (
    {"alertname": "FaultlensFailureRisk", "node": "gpu002", "severity": "warning"},
    {"score": "0.61"},
)


def test_alerts_are_sent_once_refreshed_and_resolved() -> None:
    first = reconcile({}, [A, B], now=NOW, ttl=TTL, refresh_before=REFRESH)
    assert [a["labels"]["node"] for a in first.new] == ["gpu001", "gpu002"]
    assert first.new[0]["endsAt"] == "2025-05-01T16:00:00.000Z"
    again = reconcile(
        first.state, [A, B], now=NOW + timedelta(minutes=1), ttl=TTL, refresh_before=REFRESH
    )
    assert again.payload == [] and again.unchanged == 2 and again.state == first.state
    later = reconcile(
        first.state, [A], now=NOW + timedelta(hours=3), ttl=TTL, refresh_before=REFRESH
    )
    assert [a["labels"]["node"] for a in later.refreshed] == ["gpu001"]
    assert later.refreshed[0]["startsAt"] == "2025-05-01T12:00:00.000Z"
    assert later.refreshed[0]["endsAt"] == "2025-05-01T19:00:00.000Z"
    assert [a["labels"]["node"] for a in later.resolved] == ["gpu002"]
    assert later.resolved[0]["endsAt"] == "2025-05-01T15:00:00.000Z"
    assert set(later.state) == set(
        reconcile({}, [A], now=NOW, ttl=TTL, refresh_before=REFRESH).state
    )


def test_textfile_is_valid_exposition_and_atomic(tmp_path: Path) -> None:
    rows = pl.DataFrame(
        {
            "node": ["gpu001", "gpu001"],
            "gpu": [None, "3"],
            "score": [0.25, 0.5],
            "action": ["watch", "drain_now"],
        }
    )
    lines = textfile_lines(rows, horizon_h=24, model_version='m"1', run_id="r1", now=NOW)
    assert 'faultlens_risk_score{node="gpu001",horizon_h="24"} 0.25' in lines
    assert 'faultlens_risk_score{node="gpu001",gpu="3",horizon_h="24"} 0.5' in lines
    assert 'faultlens_risk_action{node="gpu001",action="watch"} 1' in lines
    assert 'faultlens_model_info{model_version="m\\"1",run_id="r1"} 1' in lines
    epoch_s = int((NOW - datetime(1970, 1, 1)).total_seconds())
    assert f"faultlens_last_run_timestamp_seconds {epoch_s}" in lines
    path = tmp_path / "prom" / "faultlens.prom"
    write_textfile(path, lines)
    write_textfile(path, lines)
    assert path.read_text().splitlines() == lines
    assert [p.name for p in path.parent.iterdir()] == ["faultlens.prom"]  # no temp files left


def test_a_second_run_is_locked_out(tmp_path: Path) -> None:
    lock = tmp_path / "db.duckdb.lock"
    with run_lock(lock):
        with pytest.raises(LockedError, match="another faultlens run"):
            with run_lock(lock):
                pass
    with run_lock(lock):  # released again
        pass


def test_config_paths_are_relative_to_the_file(tmp_path: Path) -> None:
    cfg_path = tmp_path / "etc" / "faultlens.toml"
    cfg_path.parent.mkdir()
    cfg_path.write_text(
        '[faultlens]\ndb = "../var/f.duckdb"\n[ingest]\npaths = ["logs/*.log"]\n'
        '[prometheus]\ntextfile = "/tmp/x.prom"\n'
        '[alertmanager]\nurl = "http://127.0.0.1:9093"\nmin_action = "drain_now"\n'
    )
    cfg = load_config(cfg_path)
    assert cfg.db == (tmp_path / "var" / "f.duckdb").resolve()
    assert cfg.ingest_paths == [str(cfg_path.parent / "logs/*.log")]
    assert cfg.textfile == Path("/tmp/x.prom")
    assert cfg.min_action == "drain_now" and cfg.lock_file.name == "f.duckdb.lock"
    cfg_path.write_text('[alertmanager]\nmin_action = "panic"\n')
    with pytest.raises(ConfigError, match="min_action"):
        load_config(cfg_path)


def test_train_predict_json_and_locked_run_via_cli(tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from faultlens.app.cli import app
    from faultlens.app.common import ExitCode
    from faultlens.ingest.store import Store
    from tests.models.synthetic import random_cluster

    db = tmp_path / "f.duckdb"
    with Store(db) as store:
        truth = random_cluster(store, n_nodes=30, days=35, seed=2)
    runner = CliRunner()
    res = runner.invoke(
        app, ["train", "--db", str(db), "--as-of", truth["end"].isoformat(), "--json"]
    )
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert set(doc) >= {"model_version", "horizon_h", "test_window", "metrics"}
    assert set(doc["metrics"]) == {"model", "rule_baseline", "lemon_baseline"}
    assert set(doc["metrics"]["model"]) == {
        "pr_auc",
        "precision",
        "recall",
        "precision_at_k",
        "median_lead_time_h",
        "alerts",
        "true_alerts",
        "failure_episodes",
        "caught",
    }
    assert (tmp_path / "models" / doc["model_version"] / "model_card.json").is_file()
    floor = doc["calibration"]["floor"]
    assert set(floor) == {"floor", "seen_share", "seen_level", "failure_episodes", "min_episodes"}
    assert doc["thresholds"]["drain_after_jobs"] >= floor["floor"]
    res = runner.invoke(
        app, ["predict", "--db", str(db), "--as-of", truth["end"].isoformat(), "--json"]
    )
    assert res.exit_code == 0, res.stderr
    pred = json.loads(res.stdout)
    assert set(pred) >= {"run_id", "as_of", "alerts"}
    for a in pred["alerts"]:
        assert set(a) >= {"node", "gpu", "score", "action", "top_features"}
    # Without --as-of the prediction is as of the newest data, not the wall clock.
    res = runner.invoke(app, ["predict", "--db", str(db), "--json"])
    assert res.exit_code == 0, res.stderr
    # predict stores its predictions too: its drain suggestions are recorded with the run's
    suggested = {
        a["node"]
        for doc in (pred, json.loads(res.stdout))
        for a in doc["alerts"]
        if a["action"].startswith("drain")
    }
    with Store(db, read_only=True) as store:
        newest = store.scalar("SELECT max(ts) FROM events")
    as_of = datetime.fromisoformat(json.loads(res.stdout)["as_of"])
    assert newest < as_of <= newest + timedelta(seconds=1)
    config = tmp_path / "faultlens.toml"
    config.write_text(f'[faultlens]\ndb = "{db}"\n')
    with run_lock(load_config(config).lock_file):
        res = runner.invoke(app, ["run", "--config", str(config)])
    assert res.exit_code == ExitCode.LOCKED
    # an unlocked run records its drain suggestions, pending until the data passes the horizon
    # as of an hour before a failure late in the history (its precursors logged by then)
    late = [ts for ts, _, _ in truth["failures"] if ts > truth["start"] + timedelta(days=25)]
    at = (min(late) - timedelta(hours=1)).replace(microsecond=0)
    res = runner.invoke(app, ["run", "--config", str(config), "--as-of", at.isoformat()])
    assert res.exit_code in (ExitCode.OK, ExitCode.ATTENTION), res.stderr
    lines = [json.loads(x) for x in res.stdout.splitlines()]
    drains = {a["node"] for a in lines if a["type"] == "alert" and a["action"].startswith("drain")}
    with Store(db, read_only=True) as store:
        recorded = store.query("SELECT node, made_at, outcome FROM drain_outcomes")
    assert drains  # the model asks for drains on this cluster
    # every suggestion is recorded once: the run's, made as of its --as-of, and predict's
    at_run, others = (
        recorded.filter(pl.col("made_at") == at),
        recorded.filter(pl.col("made_at") != at),
    )
    assert sorted(at_run["node"].to_list()) == sorted(drains)
    assert set(others["node"].to_list()) == suggested
    assert recorded.select("node", "made_at").is_unique().all()
    # predict's were made as of the end of the data: their horizon has not passed yet
    assert set(others["outcome"].to_list()) <= {"pending"}
    # the data runs on past the run's horizon: each of its suggestions is already decided
    assert set(at_run["outcome"].to_list()) <= {
        "drained_failed",
        "drained_no_failure",
        "not_drained_failed",
        "not_drained_no_failure",
    }
    assert lines[-1]["drain_outcomes"] == dict(recorded.group_by("outcome").len().iter_rows())


def test_example_config_loads() -> None:
    example = Path(__file__).resolve().parents[2] / "app" / "examples" / "faultlens.toml"
    cfg = load_config(example)
    assert cfg.alertmanager_url == "http://127.0.0.1:9093"
    assert cfg.textfile == Path("/var/lib/prometheus/node-exporter/faultlens.prom")
    assert cfg.min_action == "drain_after_jobs" and cfg.ttl_h == 4

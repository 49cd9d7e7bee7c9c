"""The failure predictor: estimator contract, time split, metrics, training and prediction."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import numpy as np
import polars as pl
import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from models.actions import RiskAction, Thresholds, command, decide
from models.evaluate import event_recall_lead, precision_at_k, time_split
from models.predictor import (
    FailurePredictor,
    TrainConfig,
    predict_failures,
    save_predictions,
    train_failure_model,
)
from models.registry import load_model, save_model
from tests.models.synthetic import random_cluster


@parametrize_with_checks([FailurePredictor(n_estimators=10)])
def test_sklearn_contract(estimator, check) -> None:
    check(estimator)


def test_split_keeps_a_horizon_between_windows() -> None:
    start, end = datetime(2025, 1, 1), datetime(2025, 3, 2)  # 60 days
    s = time_split(start, end, 24, test_fraction=0.25, calib_fraction=0.15, warmup_h=168)
    assert s.test == (end - timedelta(days=15), end - timedelta(hours=24))
    assert s.calib[1] == s.test[0] - timedelta(hours=24)
    assert s.train[1] == s.calib[0] - timedelta(hours=24)
    assert s.train[0] == start + timedelta(days=7)


# Two failures; alerts on n1 at 03:00 and 06:00 before its 10:00 failure; none before n2's.
FAIL = [("n1", datetime(2025, 1, 1, 10)), ("n2", datetime(2025, 1, 2, 5))]
ROWS = [("n1", datetime(2025, 1, 1, h), s, int(h <= 10)) for h, s in ((1, .1), (3, .9), (6, .8),
                                                                     (9, .2), (12, .95))]
ROWS += [("n2", datetime(2025, 1, 2, h), 0.3, 1) for h in (1, 2)]


def _rows() -> pl.DataFrame:
    return pl.DataFrame(ROWS, schema=["node", "ts", "score", "label"], orient="row")


def test_event_recall_and_lead_time() -> None:
    episodes = pl.DataFrame(FAIL, schema=["node", "ts"], orient="row")
    recall, lead = event_recall_lead(_rows(), episodes, 24, threshold=0.5)
    assert recall == 1 / 2
    assert lead == 10 - 3  # first alert at 03:00, failure at 10:00


def test_precision_at_k_counts_per_day() -> None:
    # Day 1: n1 is the only node (label 1 in its rows that day); day 2: n2 (label 1).
    assert precision_at_k(_rows(), k=1) == 1.0
    assert precision_at_k(_rows(), k=2) == 0.5


def test_actions_and_commands() -> None:
    th = Thresholds(watch=0.2, drain_after_jobs=0.5, drain_now=0.9)
    feats = pl.DataFrame({"xid_drain_24h": [0, 0, 0, 1, 1], "off_bus_24h": [0] * 5})
    got = decide(np.array([0.1, 0.3, 0.6, 0.6, 0.3]), feats, th)
    assert got == ["none", "watch", "drain_after_jobs", "drain_now", "watch"]
    assert command("gpu001", RiskAction.DRAIN_AFTER_JOBS, "faultlens p=0.6") == (
        "scontrol update nodename=gpu001 state=drain reason='faultlens p=0.6'")
    assert command("gpu001", RiskAction.DRAIN_AFTER_JOBS, "x", "kubernetes") == (
        "kubectl cordon gpu001")
    assert command("gpu001", RiskAction.WATCH, "x") is None


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from ingest.store import Store

    path = tmp_path_factory.mktemp("pred") / "t.duckdb"
    store = Store(path)
    truth = random_cluster(store, n_nodes=60, days=45, seed=5)
    result = train_failure_model(store, as_of=truth["end"], cfg=TrainConfig())
    yield store, truth, result
    store.close()


def test_model_beats_both_baselines(trained) -> None:
    _, _, result = trained
    m = result.metrics
    assert m["model"]["pr_auc"] > m["rule_baseline"]["pr_auc"]
    assert m["model"]["pr_auc"] > m["lemon_baseline"]["pr_auc"]
    assert m["model"]["precision"] >= 0.7 and m["model"]["recall"] >= 0.5  # small cluster
    assert m["model"]["median_lead_time_h"] > 1.0
    assert set(m["model"]) >= {"pr_auc", "precision", "recall", "precision_at_k",
                               "median_lead_time_h"}


def test_model_card_round_trip(trained, tmp_path) -> None:
    _, _, result = trained
    folder = save_model(tmp_path, result.estimator, result.card)
    loaded = load_model(tmp_path)
    assert loaded.version == result.card["model_version"] == folder.name
    assert loaded.card["features"][:2] == ["xid_all_1h", "xid_all_24h"]
    assert "| model |" in (folder / "MODEL_CARD.md").read_text()
    x = np.zeros((1, len(loaded.card["features"])), dtype=np.float32)
    assert loaded.estimator.predict_proba(x)[0, 1] == pytest.approx(
        result.estimator.predict_proba(x)[0, 1])


def test_predict_explains_alerts_and_is_idempotent(trained) -> None:
    store, truth, result = trained
    # The hour before a failure in the test window: its node should be on the alert list.
    t_lo, _ = result.split.test
    ts, node, _ = next(f for f in truth["failures"] if f[0] >= t_lo + timedelta(hours=24))
    as_of = (ts - timedelta(hours=1)).replace(minute=0, second=0, microsecond=0)
    pred = predict_failures(store, result.estimator, result.card, as_of=as_of)
    assert pred.rows.height == 60 * 9  # every node and its 8 GPUs
    alert = next(a for a in pred.alerts if a["node"] == node)
    assert alert["action"] in {"watch", "drain_after_jobs", "drain_now"}
    assert alert["top_features"] and all(f["contribution"] > 0 for f in alert["top_features"])
    n1 = save_predictions(store, pred, 24)
    n2 = save_predictions(store, pred, 24)
    assert n1 == n2 == store.scalar("SELECT count(*) FROM predictions WHERE run_id = ?",
                                    [pred.run_id])
    row = store.query("SELECT top_features FROM predictions WHERE run_id = ? AND node = ? "
                      "AND gpu IS NULL", [pred.run_id, node]).row(0)
    assert json.loads(row[0])[0]["feature"] == alert["top_features"][0]["feature"]

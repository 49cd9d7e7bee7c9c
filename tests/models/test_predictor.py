"""The failure predictor: estimator contract, time split, metrics, training and prediction."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import numpy as np
import polars as pl
import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from faultlens.models.actions import RiskAction, Thresholds, command, decide
from faultlens.models.evaluate import (
    alert_episodes,
    choose_threshold,
    episode_metrics,
    precision_at_k,
    time_split,
)
from faultlens.models.predictor import (
    FailurePredictor,
    TrainConfig,
    operating_threshold,
    predict_failures,
    save_predictions,
    train_failure_model,
)
from faultlens.models.registry import load_model, save_model
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


def test_default_split_is_half_quarter_quarter() -> None:
    start, end = datetime(2025, 1, 1), datetime(2025, 5, 1)  # 120 days
    s = time_split(start, end, 24, warmup_h=168)
    h = timedelta(hours=24)
    assert s.train == (start + timedelta(days=7), start + timedelta(days=60) - h)
    assert s.calib == (start + timedelta(days=60), start + timedelta(days=90) - h)
    assert s.test == (start + timedelta(days=90), end - h)


# Two failures; alerts on n1 at 03:00 and 06:00 before its 10:00 failure; none before n2's.
FAIL = [("n1", datetime(2025, 1, 1, 10)), ("n2", datetime(2025, 1, 2, 5))]
ROWS = [
    ("n1", datetime(2025, 1, 1, h), s, int(h <= 10))
    for h, s in ((1, 0.1), (3, 0.9), (6, 0.8), (9, 0.2), (12, 0.95))
]
ROWS += [("n2", datetime(2025, 1, 2, h), 0.3, 1) for h in (1, 2)]


def _rows() -> pl.DataFrame:
    return pl.DataFrame(ROWS, schema=["node", "ts", "score", "label"], orient="row")


D = datetime(2025, 1, 1)


def _hourly(node: str, scores: dict[int, float], hours: int = 30) -> list[tuple]:
    return [(node, D + timedelta(hours=h), scores.get(h, 0.0)) for h in range(hours)]


# n1: alerts 03-04 and 08, fails 10:30, alerts again 11-12 (nothing follows);
# n2: one run of high scores 00-05 across its failure at 02:30 (two alerts: it closes at the
# failure); n3 fails at 12:00 with no alert.
EP_ROWS = pl.DataFrame(
    _hourly("n1", {3: 0.9, 4: 0.8, 8: 0.7, 11: 0.9, 12: 0.9})
    + _hourly("n2", {h: 0.9 for h in range(6)})
    + _hourly("n3", {}),
    schema=["node", "ts", "score"],
    orient="row",
)
EP_FAIL = pl.DataFrame(
    [
        ("n1", D + timedelta(hours=10, minutes=30)),
        ("n2", D + timedelta(hours=2, minutes=30)),
        ("n3", D + timedelta(hours=12)),
    ],
    schema=["node", "ts"],
    orient="row",
)


def test_alert_episodes_open_stay_and_close_at_a_failure() -> None:
    a = alert_episodes(EP_ROWS, 0.5, EP_FAIL).sort("node", "start")
    hrs = [(r["node"], r["start"].hour, r["end"].hour) for r in a.iter_rows(named=True)]
    assert hrs == [("n1", 3, 5), ("n1", 8, 9), ("n1", 11, 13), ("n2", 0, 3), ("n2", 3, 6)]


def test_episode_precision_recall_and_lead_time() -> None:
    m = episode_metrics(
        EP_ROWS, EP_FAIL, threshold=0.5, horizon_h=24, window=(D, D + timedelta(days=1))
    )
    assert (m["alerts"], m["true_alerts"]) == (5, 3)  # n1 03:00, 08:00 and n2 00:00 were right
    assert m["precision"] == 3 / 5
    assert (m["failure_episodes"], m["caught"]) == (3, 2) and m["recall"] == 2 / 3
    assert m["median_lead_time_h"] == (7.5 + 2.5) / 2  # 10:30 - 03:00 and 02:30 - 00:00


def test_episode_metrics_with_failures_keyed_by_an_enum_and_no_alert() -> None:
    # The chunked trainer keeps failure nodes as an Enum; a threshold nothing reaches gives an
    # empty alert table with String nodes (a real failure history crashed on the join).
    fails = EP_FAIL.with_columns(pl.col("node").cast(pl.Enum(["n1", "n2", "n3"])))
    m = episode_metrics(
        EP_ROWS, fails, threshold=2.0, horizon_h=24, window=(D, D + timedelta(days=1))
    )
    assert (m["alerts"], m["failure_episodes"], m["caught"]) == (0, 3, 0)
    rows = EP_ROWS.with_columns(pl.col("node").cast(fails["node"].dtype))
    m = episode_metrics(rows, fails, threshold=0.5, horizon_h=24, window=(D, D + timedelta(days=1)))
    assert (m["alerts"], m["true_alerts"], m["caught"]) == (5, 3, 2)


def test_threshold_needs_support_on_calibration_alerts() -> None:
    # 11 nodes alert at 0.7 and fail, one alerts at 0.7 and does not; two alert at 0.95 and
    # fail (precision 1, but only two alerts); 26 alert at 0.4 and nothing happens.
    rows, fails = [], []
    for i in range(40):
        score = 0.7 if i < 12 else 0.95 if i < 14 else 0.4
        rows += _hourly(f"n{i:02d}", {h: score for h in range(20, 23)}, hours=48)
        if i < 11 or 12 <= i < 14:
            fails.append((f"n{i:02d}", D + timedelta(hours=30)))
    frame = pl.DataFrame(rows, schema=["node", "ts", "score"], orient="row")
    failures = pl.DataFrame(fails, schema=["node", "ts"], orient="row")
    pick = {
        "horizon_h": 24,
        "window": (D, D + timedelta(hours=47)),
        "candidates": np.array([0.3, 0.6, 0.9]),
    }
    assert choose_threshold(frame, failures, target_precision=0.9, **pick) == 0.6  # 13 / 14
    assert (
        choose_threshold(frame, failures, target_precision=0.9, min_alerts=2, **pick) == 0.6
    )  # 0.9 has 2 / 2, but 0.6 already reaches the target
    assert choose_threshold(frame, failures, target_precision=0.95, **pick) == 0.6  # best


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
        "scontrol update nodename=gpu001 state=drain reason='faultlens p=0.6'"
    )
    assert command("gpu001", RiskAction.DRAIN_AFTER_JOBS, "x", "kubernetes") == (
        "kubectl cordon gpu001"
    )
    assert command("gpu001", RiskAction.WATCH, "x") is None


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from faultlens.ingest.store import Store

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
    assert set(m["model"]) >= {
        "pr_auc",
        "precision",
        "recall",
        "precision_at_k",
        "median_lead_time_h",
    }


def test_model_card_round_trip(trained, tmp_path) -> None:
    _, _, result = trained
    folder = save_model(tmp_path, result.estimator, result.card)
    loaded = load_model(tmp_path)
    assert loaded.version == result.card["model_version"] == folder.name
    assert loaded.card["features"][:2] == ["xid_all_1h", "xid_all_24h"]
    assert "| model |" in (folder / "MODEL_CARD.md").read_text()
    x = np.zeros((1, len(loaded.card["features"])), dtype=np.float32)
    assert loaded.estimator.predict_proba(x)[0, 1] == pytest.approx(
        result.estimator.predict_proba(x)[0, 1]
    )


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
    assert (
        n1 == n2 == store.scalar("SELECT count(*) FROM predictions WHERE run_id = ?", [pred.run_id])
    )
    row = store.query(
        "SELECT top_features FROM predictions WHERE run_id = ? AND node = ? AND gpu IS NULL",
        [pred.run_id, node],
    ).row(0)
    assert json.loads(row[0])[0]["feature"] == alert["top_features"][0]["feature"]


def test_repeated_rows_get_the_same_scores_as_scoring_every_row() -> None:
    rng = np.random.default_rng(3)
    X = rng.integers(0, 3, size=(400, 5)).astype(np.float32)
    y = (X[:, 0] + rng.random(400) > 2).astype(int)
    est = FailurePredictor(n_estimators=20, min_child_samples=5).fit(X, y)
    runs = np.repeat(X[:50], rng.integers(1, 6, size=50), axis=0)  # runs of identical rows
    runs[3, 2] = np.nan
    full = est.model_.predict(runs, raw_score=True)
    assert np.allclose(est.decision_function(runs), full)


def test_threshold_pick_smooths_a_single_dip_above_it() -> None:
    # Ten nodes alert at 0.6 and all fail; ten at 0.9, of which two do not fail; ten at 0.99 and
    # all fail. Precision by threshold: 0.5 -> 28 / 30, 0.8 -> 18 / 20 (a dip), 0.95 -> 10 / 10.
    # The isotonic fit pools the dip with its lower neighbour (46 / 50 = 0.92), so at a target
    # of 0.91 the pick is 0.5; a rule that needs every higher threshold above the target would
    # have been pushed to 0.95 by the dip alone.
    rows, fails = [], []
    for i in range(30):
        score = 0.6 if i < 10 else 0.9 if i < 20 else 0.99
        rows += _hourly(f"n{i:02d}", {h: score for h in range(20, 23)}, hours=48)
        if i not in (10, 11):
            fails.append((f"n{i:02d}", D + timedelta(hours=30)))
    frame = pl.DataFrame(rows, schema=["node", "ts", "score"], orient="row")
    failures = pl.DataFrame(fails, schema=["node", "ts"], orient="row")
    pick = {
        "horizon_h": 24,
        "window": (D, D + timedelta(hours=47)),
        "candidates": np.array([0.5, 0.8, 0.95]),
    }
    m = [
        episode_metrics(frame, failures, threshold=t, horizon_h=24, window=pick["window"])
        for t in (0.5, 0.8, 0.95)
    ]
    assert [(x["alerts"], x["true_alerts"]) for x in m] == [(30, 28), (20, 18), (10, 10)]
    assert choose_threshold(frame, failures, target_precision=0.91, **pick) == 0.5
    assert choose_threshold(frame, failures, target_precision=0.93, **pick) == 0.95


def test_threshold_pick_without_reach_starts_the_top_plateau() -> None:
    # Ten nodes alert at 0.6 (8 fail), ten at 0.85 (all fail), ten at 0.95 (8 fail). Precision
    # by threshold: 0.5 -> 26 / 30, 0.8 -> 18 / 20 (the best measured), 0.9 -> 8 / 10. The
    # isotonic fit is flat at 52 / 60; no threshold reaches 0.95, so the pick is the lowest
    # threshold of that top plateau, 0.5, not the single best measured point 0.8.
    rows, fails = [], []
    for i in range(30):
        score = 0.6 if i < 10 else 0.85 if i < 20 else 0.95
        rows += _hourly(f"n{i:02d}", {h: score for h in range(20, 23)}, hours=48)
        if i not in (0, 1, 20, 21):
            fails.append((f"n{i:02d}", D + timedelta(hours=30)))
    frame = pl.DataFrame(rows, schema=["node", "ts", "score"], orient="row")
    failures = pl.DataFrame(fails, schema=["node", "ts"], orient="row")
    window = (D, D + timedelta(hours=47))
    cands = np.array([0.5, 0.8, 0.9])
    m = [episode_metrics(frame, failures, threshold=t, horizon_h=24, window=window) for t in cands]
    assert [(x["alerts"], x["true_alerts"]) for x in m] == [(30, 26), (20, 18), (10, 8)]
    pick = {"horizon_h": 24, "window": window, "candidates": cands}
    assert choose_threshold(frame, failures, target_precision=0.95, **pick) == 0.5
    assert choose_threshold(frame, failures, target_precision=0.85, **pick) == 0.5


def test_operating_threshold_is_the_pick_within_floor_and_cap() -> None:
    capped = TrainConfig(min_threshold=0.3, max_threshold=0.4)
    assert operating_threshold(capped, 0.35) == 0.35  # inside: the calibration window's pick
    assert operating_threshold(capped, 0.1) == 0.3  # a flat curve's low pick: the floor
    assert operating_threshold(capped, 0.6) == 0.4  # a few lucky alerts high up: the cap
    assert operating_threshold(capped, float("inf")) == float("inf")  # nothing supported: none
    assert operating_threshold(TrainConfig(min_threshold=0.3, max_threshold=None), 0.6) == 0.6
    assert operating_threshold(TrainConfig(min_threshold=0.5, max_threshold=0.4), 0.9) == 0.5


def test_monotone_constraint_never_lowers_the_score() -> None:
    # Feature 0 helps only at its middle values; constrained, a higher value never scores lower.
    rng = np.random.default_rng(1)
    X = rng.random((3000, 2)).astype(np.float32)
    y = ((X[:, 0] > 0.3) & (X[:, 0] < 0.6) & (rng.random(3000) < 0.8)).astype(int)
    grid = np.column_stack([np.linspace(0, 1, 50), np.full(50, 0.5)]).astype(np.float32)
    free = FailurePredictor(n_estimators=50, min_child_samples=20).fit(X, y)
    tied = FailurePredictor(n_estimators=50, min_child_samples=20, monotone_constraints=(1, 0)).fit(
        X, y
    )
    assert np.any(np.diff(free.decision_function(grid)) < -1e-9)
    assert np.all(np.diff(tied.decision_function(grid)) >= -1e-9)


def test_alerts_opened_before_the_window_count_in_precision_too() -> None:
    # Window from 06:00: n1's 03:00 alert opened before it but caught its 10:30 failure, so it
    # counts for recall and therefore for precision; n2's alerts (00:00, 03:00) ended within a
    # horizon of the window's start and are counted as well.
    window = (D + timedelta(hours=6), D + timedelta(days=1))
    m = episode_metrics(EP_ROWS, EP_FAIL, threshold=0.5, horizon_h=24, window=window)
    assert (m["failure_episodes"], m["caught"]) == (2, 1)  # n1 10:30 caught, n3 12:00 not
    assert (m["alerts"], m["true_alerts"]) == (5, 3)
    short = episode_metrics(EP_ROWS, EP_FAIL, threshold=0.5, horizon_h=2, window=window)
    # with a 2 h horizon only alerts open after 04:00 can match: n1 03-05, 08, 11 and n2 03-06;
    # n1's 08:00 alert (open until 09:00) still catches 10:30
    assert (short["alerts"], short["true_alerts"]) == (4, 1)
    assert short["caught"] == 1


def test_episodes_from_hours_taken_at_a_lower_floor_are_the_same() -> None:
    """``choose_threshold`` sorts and joins the alerting hours once, at its lowest candidate, and
    filters them for each candidate: the episodes must be ``alert_episodes``' at every one."""
    from faultlens.models.evaluate import _alerting, _episodes

    rng = np.random.default_rng(5)
    nodes = [f"n{i}" for i in range(30)]
    frame = pl.DataFrame(
        {
            "node": np.repeat(nodes, 200),
            "ts": [D + timedelta(hours=h) for h in range(200)] * len(nodes),
            "score": rng.random(200 * len(nodes)) ** 3,
        }
    ).sample(fraction=1.0, shuffle=True, seed=1)  # not in order: both sides sort
    failures = pl.DataFrame(
        {
            "node": rng.choice(nodes, 40),
            "ts": [D + timedelta(hours=float(h)) for h in rng.uniform(0, 200, 40)],
        }
    )
    on = _alerting(frame, 0.05, failures)
    for t in (0.05, 0.1, 0.3, 0.5, 0.8, 0.99, 2.0):
        want = alert_episodes(frame, t, failures)
        got = _episodes(on, t)
        assert got.equals(want), t
        assert t > 0.99 or want.height > 0
    # the failures close episodes (the join the floor's hours carry is exercised)
    assert (
        alert_episodes(frame, 0.05, failures).height
        > alert_episodes(frame, 0.05, failures[:0]).height
    )


def test_a_model_of_another_feature_set_asks_for_a_retrain(trained, tmp_path) -> None:
    """A model saved by a faultlens that computed other features is refused with what to do,
    not fed columns it was not trained on."""
    import json

    from faultlens.ingest.errors import ModelError

    _, _, result = trained
    folder = save_model(tmp_path, result.estimator, result.card)
    card = json.loads((folder / "model_card.json").read_text())
    card["features"] = [f for f in card["features"] if f != "hours_since_fail"]
    (folder / "model_card.json").write_text(json.dumps(card))
    with pytest.raises(ModelError, match=r"1 new: hours_since_fail\): retrain"):
        load_model(tmp_path)

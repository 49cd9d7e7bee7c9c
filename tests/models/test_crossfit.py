"""Cross-fitting by node groups (``models.crossfit``): every row the calibrator and the thresholds
are fitted on is scored by trees that never saw its node, on both training paths."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import pytest

from faultlens.ingest.store import Store
from faultlens.models.crossfit import (
    fit_folds,
    node_folds,
    oof_window,
    row_folds,
    span_window,
    usable,
)
from faultlens.models.evaluate import time_split
from faultlens.models.predictor import TrainConfig, operating_floor, train_failure_model
from tests.models.synthetic import random_cluster

N_NODES = 36
NO_SAMPLING = {"max_train_rows": 10**9, "max_calib_rows": 10**9}


def test_nodes_are_dealt_round_robin_in_name_order() -> None:
    folds = node_folds(["n3", "n1", "n0", "n2", "n4"], 2)
    assert folds == {"n0": 0, "n1": 1, "n2": 0, "n3": 1, "n4": 0}
    import polars as pl

    rows = pl.Series(["n4", "n1", "n1", "n2"])
    assert row_folds(rows, folds).tolist() == [0, 1, 1, 0]


def test_usable_needs_two_groups_and_both_classes_outside_each() -> None:
    y = np.array([0, 1, 0, 0, 1, 0])
    fold = np.array([0, 0, 1, 1, 2, 2])
    nodes = ["a", "b", "c"]
    assert usable(nodes, y, fold, 3)
    assert not usable(nodes, y, fold, 1)  # one group: nothing is out of fold
    assert not usable(["a", "b"], y, fold, 3)  # fewer nodes than groups
    only_one = np.array([0, 1, 0, 0, 0, 0])  # group 0's failure is the only one:
    assert not usable(nodes, only_one, fold, 3)  # the trees for group 0 would see none


class _Recorder:
    """Stands in for ``FailurePredictor`` where only the rows each fit gets matter."""

    def __init__(self) -> None:
        self.seen: np.ndarray | None = None

    def fit(self, X, y, sample_weight=None, dask_client=None):  # noqa: ANN001, ANN201
        self.seen = X[:, 0].copy()
        return self


def test_each_fold_is_fitted_on_the_other_groups_rows_only() -> None:
    node_of_row = np.repeat(np.arange(9), 4)  # 9 nodes, 4 rows each; column 0 names the node
    X = np.column_stack([node_of_row, np.zeros(node_of_row.size)]).astype(np.float32)
    y = (np.arange(node_of_row.size) % 5 == 0).astype(int)
    folds_of = node_folds([f"n{i}" for i in range(9)], 3)
    fold = np.array([folds_of[f"n{i}"] for i in node_of_row])
    models = fit_folds(_Recorder, X, y, np.ones(y.size), fold, 3)
    for g, model in enumerate(models):
        own = set(node_of_row[fold == g].tolist())
        assert model.seen is not None
        assert not own & set(model.seen.tolist())  # never a row of its own nodes
        assert set(model.seen.tolist()) == set(node_of_row.tolist()) - own  # every other one


def test_oof_window_is_the_span_capped_by_rows_never_below_the_calibration_window() -> None:
    start = datetime(2025, 1, 1)
    split = time_split(start, start + timedelta(days=120), 24.0)
    lo, hi = span_window(split)
    assert (lo, hi) == (split.train[0], split.calib[1])
    assert oof_window(split, 100, 10**9) == (lo, hi)
    assert oof_window(split, 100, 100 * 24 * 40) == (hi - timedelta(days=40), hi)
    assert oof_window(split, 100, 100) == (split.calib[0], hi)  # capped at the calibration window


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    db = tmp_path_factory.mktemp("crossfit") / "c.duckdb"
    with Store(db) as store:
        truth = random_cluster(store, n_nodes=N_NODES, days=40, seed=5)
    return db, truth


def _train(db, truth, **kw):
    with Store(db, read_only=True) as store:
        return train_failure_model(store, as_of=truth["end"], cfg=TrainConfig(**kw))


@pytest.mark.parametrize("group", [None, 36, 5])
def test_thresholds_come_from_out_of_fold_scores_over_both_windows(cluster, group) -> None:
    db, truth = cluster
    res = _train(db, truth, cross_fit_folds=4, node_group=group, **NO_SAMPLING)
    how = res.card["calibration"]
    assert how["method"] == "cross_fit" and how["folds"] == 4
    assert how["window"] == [res.split.train[0].isoformat(), res.split.calib[1].isoformat()]
    assert res.card["trees_fitted_on"] == ["train", "calib"]
    assert res.estimator.calibrator_ is not None
    assert np.isfinite(res.thresholds.drain_after_jobs)
    # the floor the card names is the one the seen share gives, and the threshold respects it
    floor = how["floor"]
    cfg = TrainConfig()
    assert floor["failure_episodes"] > 0 and 0.0 <= floor["seen_share"] <= 1.0
    expected = operating_floor(cfg, floor["seen_share"], floor["failure_episodes"])
    assert floor["floor"] == pytest.approx(expected, abs=1e-4)
    assert cfg.low_share_floor <= floor["floor"] <= cfg.min_threshold
    assert res.thresholds.drain_after_jobs >= floor["floor"]
    # the scored rows are every row of the span (no cap at this size), the training rows too
    assert res.card["rows"]["calib"] == res.card["rows"]["train"]
    assert res.metrics["model"]["pr_auc"] > res.metrics["lemon_baseline"]["pr_auc"]


def test_node_groups_give_the_unchunked_cross_fit(cluster) -> None:
    db, truth = cluster
    whole = _train(db, truth, cross_fit_folds=4, **NO_SAMPLING)
    parts = _train(db, truth, cross_fit_folds=4, node_group=5, **NO_SAMPLING)
    assert parts.card["rows"] == whole.card["rows"]
    assert parts.card["positives"] == whole.card["positives"]
    assert parts.thresholds.drain_after_jobs == pytest.approx(
        whole.thresholds.drain_after_jobs, abs=0.02
    )
    for scorer, m in whole.metrics.items():
        for key in ("pr_auc", "precision", "recall"):
            assert parts.metrics[scorer][key] == pytest.approx(m[key], abs=0.02), (scorer, key)


def test_more_groups_than_nodes_falls_back_to_the_time_split(cluster) -> None:
    db, truth = cluster
    res = _train(db, truth, cross_fit_folds=N_NODES + 1)
    assert res.card["calibration"]["method"] == "time_split"
    assert res.card["calibration"]["window"] == [
        res.split.calib[0].isoformat(),
        res.split.calib[1].isoformat(),
    ]

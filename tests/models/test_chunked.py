"""Training in node groups gives the model the unchunked path gives, in bounded memory."""

from __future__ import annotations

import pytest

from faultlens.ingest.store import Store
from faultlens.models.predictor import TrainConfig, train_failure_model
from tests.models.synthetic import random_cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    db = tmp_path_factory.mktemp("chunked") / "c.duckdb"
    with Store(db) as store:
        truth = random_cluster(store, n_nodes=36, days=40, seed=5)
    return db, truth


def _train(db, truth, **kw):
    cfg = TrainConfig(max_train_rows=10**9, max_calib_rows=10**9, **kw)  # no sampling
    with Store(db, read_only=True) as store:
        return train_failure_model(store, as_of=truth["end"], cfg=cfg)


def test_node_groups_give_the_unchunked_model(cluster) -> None:
    db, truth = cluster
    whole = _train(db, truth)
    assert "chunked" not in whole.card
    for group in (36, 5):  # one group; 8 groups (the last of one node)
        parts = _train(db, truth, node_group=group)
        assert parts.card["chunked"] == {"node_group": group, "groups": -(-36 // group)}
        assert parts.card["rows"] == whole.card["rows"]
        assert parts.card["positives"] == whole.card["positives"]
        assert parts.card["failure_episodes"] == whole.card["failure_episodes"]
        assert parts.card["data_window"] == whole.card["data_window"]
        # the same rows in another order: the same trees up to float summation order
        for scorer, m in whole.metrics.items():
            for key in ("pr_auc", "precision", "recall"):
                assert parts.metrics[scorer][key] == pytest.approx(m[key], abs=0.02), (
                    group,
                    scorer,
                    key,
                )
        assert parts.thresholds.drain_after_jobs == pytest.approx(
            whole.thresholds.drain_after_jobs, abs=0.02
        )


def test_over_the_limit_trains_in_groups_instead_of_stopping(cluster) -> None:
    from faultlens.models.feature_catalog import FEATURES
    from faultlens.models.plan import BASE_GB, COMPACT_ROW_B, GB, plan_training

    db, truth = cluster
    rows = 500
    plan = plan_training(36, truth["start"], truth["end"], limit_gb=8.0, **FR)
    per_node = (plan.estimate_gb - BASE_GB) / 36
    # the scored rows: the test window's and, cross-fitting by default, the whole span's (no
    # cap at this size: 1 - test share) in place of the calibration window's
    assert TrainConfig().cross_fit_folds >= 2
    scored = FR["test_fraction"] + (1 - FR["test_fraction"])
    fixed = (
        BASE_GB
        + 2.2 * 2 * rows * (len(FEATURES) + 4) * 4 / GB
        + 36 * plan.hours * scored * COMPACT_ROW_B / GB
    )
    limit = fixed + 12.5 * per_node  # room for 12 nodes a group; the unchunked plan is over it
    assert limit < plan.estimate_gb
    with Store(db, read_only=True) as store:
        res = train_failure_model(
            store,
            as_of=truth["end"],
            cfg=TrainConfig(max_memory_gb=limit, max_train_rows=rows, max_calib_rows=rows),
        )
    # about 12 a group (the plan reads the data's own span, a little shorter than the truth's)
    group = res.card["chunked"]["node_group"]
    assert 9 <= group <= 12
    assert res.card["chunked"]["groups"] == -(-36 // group)
    assert res.metrics["model"]["pr_auc"] is not None


FR = {"test_fraction": 0.25, "calib_fraction": 0.25}


@pytest.mark.parametrize("group", [None, 5])
def test_refit_trees_keep_the_thresholds_of_the_trees_that_did_not_see_calibration(
    cluster, group
) -> None:
    """``refit`` (the time split, without cross-fitting): the thresholds (and the calibrator)
    are set by trees fitted on the training window alone, so they are the same with and
    without the refit; the deployed trees are fitted again on both windows, so they differ,
    and the card says which windows they saw."""
    import numpy as np

    from faultlens.models.feature_catalog import FEATURES

    db, truth = cluster
    alone = _train(db, truth, refit=False, node_group=group, cross_fit_folds=0)
    both = _train(db, truth, refit=True, node_group=group, cross_fit_folds=0)
    assert alone.card["trees_fitted_on"] == ["train"]
    assert both.card["trees_fitted_on"] == ["train", "calib"]
    assert both.thresholds == alone.thresholds
    assert both.estimator.calibrator_ is not None
    np.testing.assert_array_equal(
        both.estimator.calibrator_.coef_, alone.estimator.calibrator_.coef_
    )
    X = np.random.default_rng(0).poisson(0.3, size=(200, len(FEATURES))).astype(np.float32)
    assert not np.allclose(
        both.estimator.decision_function(X), alone.estimator.decision_function(X)
    )

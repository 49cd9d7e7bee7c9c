"""Training on a real Dask LocalCluster (worker processes) with ``lightgbm.dask``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from faultlens.models.dask_train import fit_on_dask

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as c,
    ):
        yield c


def test_trees_trained_on_two_workers_match_local_quality(client) -> None:
    import lightgbm as lgb

    rng = np.random.default_rng(5)
    X = rng.normal(size=(30_000, 6)).astype(np.float32)
    y = (X[:, 0] + 0.5 * X[:, 1] + rng.normal(scale=0.5, size=len(X)) > 1.5).astype(int)
    params = {"n_estimators": 60, "num_leaves": 15, "max_bin": 63, "verbose": -1, "n_jobs": 1}
    model = fit_on_dask(client, X[:20_000], y[:20_000], None, params)
    assert isinstance(model, lgb.LGBMClassifier)  # a local model: pickles, scores, explains
    assert model.booster_.num_trees() == 60
    local = lgb.LGBMClassifier(**params).fit(X[:20_000], y[:20_000])
    auc_dask = roc_auc_score(y[20_000:], model.predict_proba(X[20_000:])[:, 1])
    auc_local = roc_auc_score(y[20_000:], local.predict_proba(X[20_000:])[:, 1])
    assert auc_dask > 0.95
    assert abs(auc_dask - auc_local) < 0.01
    contrib = model.predict(X[:3], pred_contrib=True)
    assert contrib.shape == (3, 7)


def test_cli_train_on_a_local_dask_cluster(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from faultlens.app.cli import app
    from faultlens.ingest.store import Store
    from tests.models.synthetic import random_cluster

    db = tmp_path / "f.duckdb"
    with Store(db) as store:
        truth = random_cluster(store, n_nodes=30, days=35, seed=2)
    res = CliRunner().invoke(
        app,
        [
            "train",
            "--db",
            str(db),
            "--as-of",
            truth["end"].isoformat(),
            "--dask",
            "local",
            "--workers",
            "2",
            "--json",
        ],
    )
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    card = json.loads((tmp_path / "models" / doc["model_version"] / "model_card.json").read_text())
    assert card["trained_on"] == {"dask_workers": 2}
    assert doc["metrics"]["model"]["pr_auc"] > doc["metrics"]["rule_baseline"]["pr_auc"]

"""The issue's acceptance bar for the failure predictor, end to end on a fresh synthetic cluster.

"On a synthetic cluster generated with a seed not used during development, on its last quarter
of time, the model beats both baselines on PR-AUC, and at its operating threshold reaches
precision >= 0.85 with recall >= 0.5 and a median lead time of hours, not minutes."

``ACCEPTANCE_SEED`` is a development seed, not a held-out one: its recall read 0.34 when this
test first ran and reached 0.55 while the threshold rule, its floor and features were changed
looking at it. It stays here as a regression check of the end-to-end path; the held-out figures
come from the ten evaluation seeds of ``bench/bench_evaluate.py`` (README, "Predicting failures"). The cluster goes through the real path: synth writes
raw logs, ``ingest_paths`` parses them, ``attribution.refresh`` links and attributes, and
``train_failure_model`` (what ``faultlens train`` runs, with its defaults) trains and evaluates.
Precision, recall and lead time are counted over alert episodes (models/evaluate.py).

Sized to run in under three minutes on two shared cores, and documented where it departs from
the demo defaults:
- 256 nodes x 120 days at Meta RSC-1's failure rate (6.50 per 1000 node-days,
  published-figures.md A2) instead of Llama 3's 3.79: the last quarter then holds a few dozen
  hardware failure episodes, enough for precision and recall to mean something;
- no per-job NCCL / PyTorch / training logs, two-hourly telemetry, a quarter of the ordinary
  log noise: they cost ingest time and carry no hardware-failure evidence in the synthetic model.
"""

from __future__ import annotations

from datetime import datetime

import pytest

from faultlens.app.demo import synth_context
from faultlens.ingest.attribution import refresh
from faultlens.ingest.catalog import load_catalog
from faultlens.ingest.pipeline import ingest_paths
from faultlens.models.predictor import TrainConfig, train_failure_model
from faultlens.synth.config import META_RSC1_FAILURES_PER_1000_NODE_DAYS, SynthConfig
from faultlens.synth.generate import generate

ACCEPTANCE_SEED = 31337  # a development seed (bench.bench_evaluate.DEV_SEEDS)
NOT_LOGS = {"topology.csv", "ground_truth.json"}


def acceptance_config(seed: int = ACCEPTANCE_SEED) -> SynthConfig:
    return SynthConfig(
        n_nodes=256,
        days=120.0,
        seed=seed,
        failures_per_1000_node_days=META_RSC1_FAILURES_PER_1000_NODE_DAYS,
        telemetry_interval_min=120.0,
        noise_lines_per_node_day=6.0,
        write_job_logs=False,
        write_training=False,
    )


def build_and_train(store, out, seed: int = ACCEPTANCE_SEED):
    """Synth -> ingest -> refresh -> train; returns the TrainResult."""
    result = generate(acceptance_config(seed), out)
    store.load_xid_catalog(load_catalog(None))
    logs = [str(p) for p in result.files if p.name not in NOT_LOGS]
    report = ingest_paths(store, logs, now=datetime(2030, 1, 1), base_ctx=synth_context())
    assert report.totals["failed"] == 0
    refresh(store)
    end = datetime.fromisoformat(result.truth["summary"]["window"][1])
    return train_failure_model(store, as_of=end, cfg=TrainConfig())


@pytest.fixture(scope="module")
def acceptance(tmp_path_factory):
    from faultlens.ingest.store import Store

    folder = tmp_path_factory.mktemp("acceptance")
    with Store(folder / "db.duckdb") as store:
        yield build_and_train(store, folder / "synth").metrics


@pytest.mark.slow
def test_model_beats_both_baselines_with_precision_and_lead_time(acceptance) -> None:
    model = acceptance["model"]
    assert model["failure_episodes"] >= 20  # the test window holds enough failures to judge
    assert model["pr_auc"] > acceptance["rule_baseline"]["pr_auc"]
    assert model["pr_auc"] > acceptance["lemon_baseline"]["pr_auc"]
    assert model["precision"] >= 0.85
    assert model["median_lead_time_h"] >= 1.0


# 31337 is a development seed (README says why), so this is a regression check, not a held-out
# figure. It read 0.55 before precision began counting every alert recall uses and node names
# stopped being taken from folders, 0.43 after, 0.47 with the threshold rule's new fallback, and
# 0.55 (21 of 38 episodes, precision 0.91) on the tree that merged session 4's parser and feature
# changes. The held-out figure is the evaluation seeds' in README.
@pytest.mark.slow
def test_recall_at_operating_threshold_reaches_half(acceptance) -> None:
    assert acceptance["model"]["recall"] >= 0.5

"""Mean, interval and pooled counts over evaluation seeds (models/evaluate.py)."""

from __future__ import annotations

import math

from faultlens.models.evaluate import mean_interval, summarize_seeds

# t(0.975, df=2) from a t table
T_975_DF2 = 4.302653


def _m(pr_auc, precision, recall, lead, alerts, true_alerts, episodes, caught):
    return {
        "pr_auc": pr_auc,
        "precision": precision,
        "recall": recall,
        "median_lead_time_h": lead,
        "alerts": alerts,
        "true_alerts": true_alerts,
        "failure_episodes": episodes,
        "caught": caught,
    }


SEEDS = [
    {
        "model": _m(0.4, 0.9, 0.5, 20.0, 10, 9, 30, 15),
        "rule_baseline": _m(0.1, 0.2, 0.3, 5.0, 40, 8, 30, 9),
    },
    {
        "model": _m(0.5, 0.8, 0.6, 10.0, 5, 4, 20, 12),
        "rule_baseline": _m(0.2, 0.1, 0.2, 1.0, 50, 5, 20, 4),
    },
    {
        "model": _m(0.6, None, 0.0, None, 0, 0, 10, 0),
        "rule_baseline": _m(0.3, 0.3, 0.4, 3.0, 10, 3, 10, 4),
    },
]


def test_mean_interval_is_the_student_t_interval() -> None:
    got = mean_interval([1.0, 2.0, 3.0])
    half = T_975_DF2 * 1.0 / math.sqrt(3)  # sample sd of 1, 2, 3 is 1
    assert got["mean"] == 2.0 and got["n"] == 3
    assert abs(got["lo"] - (2.0 - half)) < 1e-3 and abs(got["hi"] - (2.0 + half)) < 1e-3


def test_mean_interval_skips_missing_and_handles_one_value() -> None:
    assert mean_interval([None, 0.5]) == {"mean": 0.5, "lo": None, "hi": None, "n": 1}
    assert mean_interval([None])["mean"] is None


def test_summary_pools_counts_and_averages_seeds() -> None:
    s = summarize_seeds(SEEDS)
    model = s["model"]
    assert model["seeds"] == 3
    assert model["pr_auc"]["mean"] == 0.5
    assert model["precision"]["n"] == 2  # the seed without alerts has no precision
    assert abs(model["precision"]["mean"] - 0.85) < 1e-9
    assert model["pooled"]["alerts"] == 15 and model["pooled"]["true_alerts"] == 13
    assert abs(model["pooled"]["precision"] - round(13 / 15, 4)) < 1e-9
    assert abs(model["pooled"]["recall"] - round(27 / 60, 4)) < 1e-9
    assert s["rule_baseline"]["pooled"]["caught"] == 17


def test_seed_lists_are_apart_and_the_evaluation_list_is_the_documented_draw() -> None:
    import numpy as np

    from bench.bench_evaluate import DEV_SEEDS, EVAL_SEEDS, RETIRED_SEEDS

    drawn = np.random.default_rng(20261213).integers(100_000, 1_000_000, 10).tolist()
    assert list(EVAL_SEEDS) == drawn
    assert not set(EVAL_SEEDS) & (set(DEV_SEEDS) | set(RETIRED_SEEDS))
    assert not set(DEV_SEEDS) & set(RETIRED_SEEDS)
    assert len(RETIRED_SEEDS) == len(set(RETIRED_SEEDS)) == 120

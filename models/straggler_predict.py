"""Straggler prediction: which GPUs will straggle in the next window, from their trends now.

Features per (job, GPU, window) come from the detector's window frame: the peer z-scores, the
throttle-reason shares, and trends over the previous windows (temperature and power slope,
growth of PCIe link errors), plus whether the GPU straggles now. The target is "flagged as a
straggler in the next window". The model is judged like the failure model, on a time-ordered
split and beside the plain baseline "straggled in the previous window".
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.metrics import average_precision_score, precision_score, recall_score
from sklearn.utils.multiclass import unique_labels
from sklearn.utils.validation import check_is_fitted, validate_data

FEATURES = (
    "z_clock",
    "z_temp",
    "z_power",
    "z_util",
    "z_pcie",
    "thermal_frac",
    "power_frac",
    "temp_slope",
    "temp_slope_3",
    "power_slope",
    "power_slope_3",
    "replay_delta",
    "replay_growth",
    "replay_3",
    "slow_now",
    "flagged_now",
)
KEY = ["job_id", "node", "gpu"]


def window_features(windows: pl.DataFrame) -> pl.DataFrame:
    """Features and target (``target``: flagged in window w+1) per (job, node, gpu, w)."""
    df = windows.sort([*KEY, "w"])

    def lag(col: str, n: int = 1) -> pl.Expr:
        return pl.col(col).shift(n).over(KEY)

    nxt_w = pl.col("w").shift(-1).over(KEY)
    nxt_flag = pl.col("flagged").shift(-1).over(KEY)
    return df.with_columns(
        temp_slope=pl.col("temp") - lag("temp"),
        temp_slope_3=pl.col("temp") - lag("temp", 3),
        power_slope=pl.col("power") - lag("power"),
        power_slope_3=pl.col("power") - lag("power", 3),
        replay_growth=pl.col("replay_delta") - lag("replay_delta"),
        replay_3=pl.col("replay_delta")
        + lag("replay_delta").fill_null(0)
        + lag("replay_delta", 2).fill_null(0),
        slow_now=pl.col("raw_cause").is_not_null().cast(pl.Float64),
        flagged_now=pl.col("flagged").cast(pl.Float64),
        target=pl.when(nxt_w == pl.col("w") + 1).then(nxt_flag.cast(pl.Int8)),
    ).filter(pl.col("target").is_not_null())


def to_matrix(features: pl.DataFrame) -> np.ndarray:
    return features.select(pl.col(list(FEATURES)).cast(pl.Float64)).to_numpy()


class StragglerPredictor(ClassifierMixin, BaseEstimator):
    """Gradient-boosted trees over window features (scikit-learn conventions; NaN allowed)."""

    def __init__(
        self,
        max_iter: int = 200,
        learning_rate: float = 0.05,
        max_depth: int | None = 4,
        random_state: int | None = 0,
    ) -> None:
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.max_depth = max_depth
        self.random_state = random_state

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        return tags

    def fit(self, X: Any, y: Any) -> StragglerPredictor:
        X, y = validate_data(self, X, y, ensure_all_finite="allow-nan")
        self.classes_ = unique_labels(y)
        self.model_ = HistGradientBoostingClassifier(
            max_iter=self.max_iter,
            learning_rate=self.learning_rate,
            max_depth=self.max_depth,
            random_state=self.random_state,
        )
        if len(self.classes_) < 2:
            self.model_ = None
            self.n_iter_ = 0
        else:
            self.model_.fit(X, y)
            self.n_iter_ = self.model_.n_iter_
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, ensure_all_finite="allow-nan")
        if self.model_ is None:
            return np.ones((X.shape[0], 1))
        return self.model_.predict_proba(X)

    def predict(self, X: Any) -> np.ndarray:
        proba = self.predict_proba(X)
        return self.classes_[np.argmax(proba, axis=1)]


def _metrics(y: np.ndarray, score: np.ndarray) -> dict[str, float]:
    pred = score >= 0.5
    return {
        "pr_auc": float(average_precision_score(y, score)) if y.any() else float("nan"),
        "precision": float(precision_score(y, pred, zero_division=0)),
        "recall": float(recall_score(y, pred, zero_division=0)),
    }


def evaluate(
    windows: pl.DataFrame, *, train_frac: float = 0.6, random_state: int = 0
) -> dict[str, Any]:
    """Fit on the earliest windows, score the later ones; the model beside the baseline."""
    feats = window_features(windows).sort("win_start")
    if feats.height < 10:
        raise ValueError("too few windows to evaluate the straggler predictor")
    cut = feats["win_start"][int(feats.height * train_frac)]
    train, test = feats.filter(pl.col("win_start") < cut), feats.filter(pl.col("win_start") >= cut)
    y_train, y_test = train["target"].to_numpy(), test["target"].to_numpy()
    model = StragglerPredictor(random_state=random_state).fit(to_matrix(train), y_train)
    proba = model.predict_proba(to_matrix(test))
    score = proba[:, 1] if proba.shape[1] == 2 else np.zeros(test.height)
    baseline = test["flagged_now"].to_numpy()
    return {
        "test_window": [str(cut), str(test["win_start"].max())],
        "n_train": train.height,
        "n_test": test.height,
        "positives_test": int(y_test.sum()),
        "metrics": {"model": _metrics(y_test, score), "baseline": _metrics(y_test, baseline)},
    }

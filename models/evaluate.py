"""Evaluating failure scores: the time-ordered split, the two baselines, and the metrics.

Every evaluation scores three things side by side on the same rows:

- ``model``: the calibrated LightGBM probability;
- ``rule_baseline``: what SREs run today (NVSentinel / DCGM-policy style): alert when the node had
  a critical Xid (catalog action GPU reset or worse), an ECC or row-remap event, a GPU that fell off
  the bus, or an uncorrectable / remap-failure counter increase in the last 24 h;
- ``lemon_baseline``: failures of the node in the last 28 days (Meta's lemon-node signal).

Metrics (``M``): ``pr_auc`` (average precision over node-hour rows), ``precision`` (share of
alerting rows followed by a failure within the horizon) and ``recall`` (share of failure episodes
with at least one alert in the horizon before them) at the operating threshold,
``precision_at_k`` (each day, the k highest-scoring nodes: share that fail within the horizon),
and ``median_lead_time_h`` (from the first alert in the horizon before a caught failure to it).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
import polars as pl
from sklearn.metrics import average_precision_score, precision_recall_curve

RULE_COLUMNS = (
    "xid_critical_24h", "ecc_24h", "row_remap_24h", "off_bus_24h", "ecc_dbe_inc_24h",
    "remap_fail_inc_24h", "remap_uncorr_inc_24h",
)
LEMON_COLUMN = "fail_28d"
BASELINES = ("rule_baseline", "lemon_baseline")


def rule_score(frame: pl.DataFrame) -> np.ndarray:
    """1.0 where the SRE rule fires (any critical Xid / ECC-class event in the last 24 h)."""
    fired = frame.select(pl.sum_horizontal(RULE_COLUMNS) > 0).to_series()
    return fired.cast(pl.Float64).to_numpy()


def lemon_score(frame: pl.DataFrame) -> np.ndarray:
    return frame[LEMON_COLUMN].cast(pl.Float64).to_numpy()


@dataclass(frozen=True)
class Split:
    """Time-ordered windows of row times; consecutive windows are ``horizon`` apart (no leakage)."""

    train: tuple[datetime, datetime]
    calib: tuple[datetime, datetime]
    test: tuple[datetime, datetime]

    def to_json(self) -> dict[str, list[str]]:
        return {k: [getattr(self, k)[0].isoformat(), getattr(self, k)[1].isoformat()]
                for k in ("train", "calib", "test")}


def time_split(start: datetime, end: datetime, horizon_h: float, *, test_fraction: float = 0.25,
               calib_fraction: float = 0.15, warmup_h: float = 168.0) -> Split:
    """Train / calibration / test windows over ``[start, end]``: test is the last
    ``test_fraction`` of the time, calibration the ``calib_fraction`` before it. Each window's
    last row is a horizon before the next window starts, so no label reads the next window."""
    span = end - start
    h = timedelta(hours=horizon_h)
    test_start = end - span * test_fraction
    calib_start = test_start - span * calib_fraction
    train_start = start + timedelta(hours=warmup_h)
    if calib_start - h <= train_start:
        train_start = start + min(timedelta(hours=warmup_h), (calib_start - h - start) / 2)
    return Split(
        train=(train_start, calib_start - h),
        calib=(calib_start, test_start - h),
        test=(test_start, end - h),
    )


def choose_threshold(scores: np.ndarray, labels: np.ndarray, target_precision: float,
                     weights: np.ndarray | None = None) -> float:
    """Lowest threshold whose precision reaches ``target_precision`` (most recall at that
    precision); if none does, the threshold of best F1."""
    if labels.sum() == 0 or scores.size == 0:
        return float(np.inf)
    precision, recall, thresholds = precision_recall_curve(labels, scores, sample_weight=weights)
    precision, recall = precision[:-1], recall[:-1]
    ok = np.flatnonzero(precision >= target_precision)
    if ok.size:
        best = ok[np.argmax(recall[ok])]
    else:
        f1 = 2 * precision * recall / np.maximum(precision + recall, 1e-12)
        best = int(np.argmax(f1))
    return float(thresholds[best])


def event_recall_lead(rows: pl.DataFrame, episodes: pl.DataFrame, horizon_h: float,
                      threshold: float) -> tuple[float | None, float | None]:
    """Share of failure episodes with an alert in the horizon before them, and the median hours
    from the first such alert to the failure. ``rows``: node, ts, score."""
    if episodes.height == 0:
        return None, None
    h = timedelta(hours=horizon_h)
    alerts = rows.filter(pl.col("score") >= threshold).select("node", pl.col("ts").alias("at"))
    first = (
        episodes.select("node", "ts").with_row_index("ep")
        .join(alerts, on="node", how="inner")
        .filter((pl.col("at") <= pl.col("ts")) & (pl.col("at") > pl.col("ts") - h))
        .group_by("ep").agg((pl.col("ts") - pl.col("at")).max().alias("lead"))
    )
    recall = first.height / episodes.height
    if first.height == 0:
        return recall, None
    lead_h = first["lead"].dt.total_seconds().to_numpy() / 3600.0
    return recall, float(np.median(lead_h))


def precision_at_k(rows: pl.DataFrame, k: int) -> float | None:
    """Each day, the ``k`` nodes with the highest score that day (ties by name): the share of
    them with a failure within the horizon of a row that day. ``rows``: node, ts, score, label."""
    if rows.height == 0 or k <= 0:
        return None
    daily = (
        rows.group_by(pl.col("ts").dt.truncate("1d").alias("day"), "node")
        .agg(pl.col("score").max(), pl.col("label").max())
        .sort(["day", "score", "node"], descending=[False, True, False])
        .group_by("day", maintain_order=True).head(k)
    )
    days = daily["day"].n_unique()
    return float(daily["label"].sum() / (k * days))


def metrics(rows: pl.DataFrame, episodes: pl.DataFrame, *, threshold: float, horizon_h: float,
            k: int) -> dict[str, float | None]:
    """The metric set ``M`` for one scorer. ``rows``: node, ts, label, score."""
    labels = rows["label"].to_numpy()
    scores = rows["score"].to_numpy()
    pr_auc = float(average_precision_score(labels, scores)) if labels.sum() else None
    fired = scores >= threshold
    precision = float(labels[fired].mean()) if fired.any() else None
    recall, lead = event_recall_lead(rows, episodes, horizon_h, threshold)
    return {
        "pr_auc": _round(pr_auc), "precision": _round(precision), "recall": _round(recall),
        "precision_at_k": _round(precision_at_k(rows, k)), "median_lead_time_h": _round(lead),
        "threshold": _round(threshold if np.isfinite(threshold) else None),
        "alerts": int(fired.sum()),
    }


def _round(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(float(x), nd)


def evaluate_all(test: pl.DataFrame, model_scores: np.ndarray, episodes: pl.DataFrame, *,
                 thresholds: dict[str, float], horizon_h: float, k: int) -> dict[str, dict]:
    """Model and both baselines on the same test rows, with their operating thresholds."""
    base = test.select("node", "ts", "label")
    scored = {
        "model": model_scores,
        "rule_baseline": rule_score(test),
        "lemon_baseline": lemon_score(test),
    }
    return {
        name: metrics(base.with_columns(pl.Series("score", s)), episodes,
                      threshold=thresholds[name], horizon_h=horizon_h, k=k)
        for name, s in scored.items()
    }


def baseline_thresholds(calib: pl.DataFrame, target_precision: float,
                        weights: np.ndarray | None = None) -> dict[str, float]:
    """The rule fires at 1; the lemon count's threshold is chosen on calibration rows like the
    model's (never below one failure)."""
    labels = calib["label"].to_numpy()
    lemon = choose_threshold(lemon_score(calib), labels, target_precision, weights)
    return {"rule_baseline": 1.0, "lemon_baseline": max(1.0, lemon)}

"""Evaluating failure scores: the time-ordered split, the two baselines, and the metrics.

Every evaluation scores three things side by side on the same rows:

- ``model``: the calibrated LightGBM probability;
- ``rule_baseline``: what SREs run today (NVSentinel / DCGM-policy style): alert when the node had
  a critical Xid (catalog action GPU reset or worse), an ECC or row-remap event, a GPU that fell off
  the bus, or an uncorrectable / remap-failure counter increase in the last 24 h;
- ``lemon_baseline``: failures of the node in the last 28 days (Meta's lemon-node signal).

Metrics (``M``), the same for all three scorers, computed on the test window (documented again in
the model card):

- ``pr_auc``: average precision over node-hour rows (the standard, threshold-free measure; the
  label of a row is "a failure episode of this node starts within the horizon").
- An **alert episode** is what an SRE sees: on one node, the score crossing the threshold opens
  an alert; it stays open while the hourly score stays at or above the *clear* level (the watch
  threshold, half the operating one: an alert does not flap off and on as the score wavers
  around its threshold), and it closes when the score drops below that or when the node fails (a
  failure closes the alert it caught; if the score is still high after it, that is a new
  alert). With the clear level equal to the threshold, an alert is open exactly while the score
  is at or above the threshold (the baselines, whose scores are counts). An alert open from
  ``start`` until ``end`` (the last open hour + 1 h) and a failure episode of the same node at
  ``f`` **match** when ``start <= f < end + horizon``: the alert was open at some time in the
  horizon before the failure.
- ``precision``: alert episodes that match a failure episode / all alert episodes that could
  match a failure of the window (started before its end, open or within a horizon after its
  start), the same alerts recall counts: a caught failure always comes with a true alert.
- ``recall``: failure episodes matched by an alert episode / all failure episodes.
- ``median_lead_time_h``: over caught failures, ``f - start`` of the earliest matching alert.
- ``precision_at_k``: each day, the ``k`` highest-scoring nodes; the share of them with a failure
  within the horizon of a row that day (an SRE who can drain ``k`` nodes a day).
- ``alerts`` / ``failure_episodes`` / ``caught``: the counts behind precision and recall.

The operating threshold is chosen with the same alert episodes (``choose_threshold``) on
out-of-fold scores over the training and calibration windows (``models.crossfit``), or on the
calibration window.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
import polars as pl
from sklearn.isotonic import IsotonicRegression
from sklearn.metrics import average_precision_score

from faultlens.models.actions import clear_level

RULE_COLUMNS = (
    "xid_critical_24h",
    "ecc_24h",
    "row_remap_24h",
    "off_bus_24h",
    "ecc_dbe_inc_24h",
    "remap_fail_inc_24h",
    "remap_uncorr_inc_24h",
)
LEMON_COLUMN = "fail_28d"
BASELINES = ("rule_baseline", "lemon_baseline")
HOUR = timedelta(hours=1)
# The short form of the module doc, for the model card.
METRIC_DEFINITIONS = {
    "pr_auc": "average precision over node-hour rows of the test window",
    "alert": "an episode per node: opens when the hourly score reaches the threshold, stays "
    "open while it stays at or above the clear level (the card's thresholds.clear), closes when it "
    "drops below that or when the node fails",
    "precision": "alert episodes followed by a failure of that node while open or within the "
    "horizon after / all alert episodes that could match a failure of the window",
    "recall": "failure episodes with an alert open within the horizon before them / all "
    "failure episodes",
    "median_lead_time_h": "median over caught failures of failure time - start of the "
    "earliest matching alert",
    "precision_at_k": "each day, the k highest-scoring nodes: share that fail within the horizon",
    "threshold": "max(floor, lowest threshold whose alert precision on the scored "
    "rows it is fitted on (out-of-fold over the training and calibration windows, or the "
    "calibration window: the card's calibration), isotonic-smoothed over thresholds with at "
    "least min_alerts alerts, reaches the target; if none does, the lowest threshold of the "
    "smoothed curve's top); the floor is min_threshold, lowered towards low_share_floor where "
    "the same scores saw few of the window's failures coming (the card's calibration.floor)",
}


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
        return {
            k: [getattr(self, k)[0].isoformat(), getattr(self, k)[1].isoformat()]
            for k in ("train", "calib", "test")
        }


def time_split(
    start: datetime,
    end: datetime,
    horizon_h: float,
    *,
    test_fraction: float = 0.25,
    calib_fraction: float = 0.25,
    warmup_h: float = 168.0,
) -> Split:
    """Train / calibration / test windows over ``[start, end]``: test is the last
    ``test_fraction`` of the time, calibration the ``calib_fraction`` before it, training the rest
    (by default: first half, third quarter, last quarter). Each window's last row is a horizon
    before the next window starts, so no label reads the next window."""
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


# -- alert episodes --------------------------------------------------------------------------------

_ALERT_SCHEMA = {"node": pl.String, "start": pl.Datetime("us"), "end": pl.Datetime("us")}


def alert_episodes(
    rows: pl.DataFrame, threshold: float, failures: pl.DataFrame, clear: float | None = None
) -> pl.DataFrame:
    """Alert episodes (node, start, end) from hourly scores (``rows``: node, ts, score).

    An episode opens at the first hour with ``score >= threshold`` and stays open through
    consecutive hours with ``score >= clear`` (``clear``: at most ``threshold``; None: the
    threshold itself); a failure of the node (``failures``: node, ts) between two hours closes
    it. ``end`` is the last open hour + 1 h."""
    if rows.height == 0 or not np.isfinite(threshold):
        return pl.DataFrame(schema=_ALERT_SCHEMA)
    low = clear_level(threshold, clear)
    return _episodes(_alerting(rows, low, failures), threshold, low)


def _alerting(rows: pl.DataFrame, floor: float, failures: pl.DataFrame) -> pl.DataFrame:
    """The hours with ``score >= floor``, sorted by node and time, each with ``nf``: how many of
    its node's failures came before it. Alert episodes at any threshold ``>= floor`` are read
    from this (``_episodes``) without sorting or joining again."""
    on = rows.select("node", "ts", "score").filter(pl.col("score") >= floor)
    if on.height == 0:  # no join: the failures' nodes may be of another type (an Enum)
        return on.with_columns(nf=pl.lit(0, pl.UInt32))
    fl = (
        failures.select("node", pl.col("ts").cast(pl.Datetime("us")).alias("fts"))
        .sort("node", "fts")
        .with_columns(pl.int_range(1, pl.len() + 1).over("node").alias("nf"))
    )
    on = on.with_columns(pl.col("ts").cast(pl.Datetime("us"))).sort("node", "ts")
    on = on.join_asof(
        fl,
        left_on="ts",
        right_on="fts",
        by="node",
        strategy="backward",
        check_sortedness=False,
        allow_exact_matches=False,
    ).with_columns(pl.col("nf").fill_null(0))
    return on


def _episodes(on: pl.DataFrame, threshold: float, clear: float | None = None) -> pl.DataFrame:
    """Alert episodes at ``threshold`` that close below ``clear`` (None: the threshold) from
    ``_alerting``'s hours (taken at a floor <= both): each run of consecutive hours at or above
    ``clear`` (one failure count) holds at most one alert, open from its first hour at or above
    ``threshold`` to the run's end."""
    on = on.filter(pl.col("score") >= clear_level(threshold, clear))
    if on.height == 0:
        return pl.DataFrame(schema=_ALERT_SCHEMA)
    new = (
        pl.col("ts").shift(1).over("node").is_null()
        | (pl.col("ts") - pl.col("ts").shift(1).over("node") != HOUR)
        | (pl.col("nf") != pl.col("nf").shift(1).over("node"))
    )
    on = on.with_columns(new.cum_sum().alias("aid"))
    if clear is not None and clear < threshold:
        on = on.filter((pl.col("score") >= threshold).cum_max().over("aid"))
    return (
        on.group_by("aid", maintain_order=True)
        .agg(
            pl.col("node").first(),
            pl.col("ts").min().alias("start"),
            (pl.col("ts").max() + HOUR).alias("end"),
        )
        .select(list(_ALERT_SCHEMA))
    )


def match_alerts(
    alerts: pl.DataFrame, failures: pl.DataFrame, horizon_h: float
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Alerts with ``true`` (it matched a failure), failures with ``lead_h`` (hours from the
    earliest matching alert's start; null when no alert caught it). See the module doc."""
    h = timedelta(hours=horizon_h)
    # Node names as strings on both sides: the chunked trainer keeps failures' nodes as an Enum,
    # while an empty alert table (no score over the threshold) has them as String.
    a = alerts.with_columns(pl.col("node").cast(pl.String)).with_row_index("aid")
    f = failures.select(
        pl.col("node").cast(pl.String), pl.col("ts").cast(pl.Datetime("us"))
    ).with_row_index("fid")
    pairs = a.join(f, on="node", how="inner").filter(
        (pl.col("start") <= pl.col("ts")) & (pl.col("ts") < pl.col("end") + h)
    )
    true_ids = pairs["aid"].unique()
    leads = pairs.group_by("fid").agg(
        ((pl.col("ts") - pl.col("start")).max().dt.total_seconds() / 3600.0).alias("lead_h")
    )
    a = a.with_columns(pl.col("aid").is_in(true_ids.implode()).alias("true")).drop("aid")
    f = f.join(leads, on="fid", how="left").drop("fid")
    return a, f


def episode_metrics(
    rows: pl.DataFrame,
    failures: pl.DataFrame,
    *,
    threshold: float,
    horizon_h: float,
    window: tuple[datetime, datetime],
    clear: float | None = None,
) -> dict[str, float | None]:
    """Precision, recall and median lead time of alert episodes (module doc). Failures are
    counted when they happen in ``window``; alerts when they could match one (they start
    before its end and are open, or ended less than a horizon, after its start: ``rows`` may
    start a horizon early); matching may also use failures after the window."""
    episodes = alert_episodes(rows, threshold, failures, clear)
    return _episode_metrics(episodes, failures, horizon_h, window)


def _episode_metrics(
    episodes: pl.DataFrame,
    failures: pl.DataFrame,
    horizon_h: float,
    window: tuple[datetime, datetime],
) -> dict[str, float | None]:
    lo, hi = window
    alerts, fails = match_alerts(episodes, failures, horizon_h)
    # Counted: every alert that could match a failure of the window (the same alerts recall
    # uses), so that a caught failure always comes with a true alert.
    reach = pl.col("end") + timedelta(hours=horizon_h)
    alerts = alerts.filter((pl.col("start") <= hi) & (reach > lo))
    fails = fails.filter(pl.col("ts").is_between(lo, hi))
    caught = fails.filter(pl.col("lead_h").is_not_null())
    return {
        "precision": float(alerts["true"].mean()) if alerts.height else None,
        "recall": caught.height / fails.height if fails.height else None,
        "median_lead_time_h": float(caught["lead_h"].median()) if caught.height else None,
        "alerts": alerts.height,
        "true_alerts": int(alerts["true"].sum()) if alerts.height else 0,
        "failure_episodes": fails.height,
        "caught": caught.height,
    }


def choose_threshold(
    rows: pl.DataFrame,
    failures: pl.DataFrame,
    *,
    horizon_h: float,
    window: tuple[datetime, datetime],
    target_precision: float,
    min_alerts: int = 10,
    candidates: np.ndarray | None = None,
    clear_fraction: float = 1.0,
) -> float:
    """The operating threshold, from alert episodes on the calibration window (an alert at a
    threshold ``t`` closes below ``t * clear_fraction``, as the deployed alerts do).

    Among thresholds with at least ``min_alerts`` alert episodes (the support rule: a precision
    measured on three alerts means nothing), the lowest one whose *smoothed* alert precision
    reaches ``target_precision``. The smoothing is an isotonic (non-decreasing in the threshold)
    fit of the measured precisions weighted by their alert counts: on a calibration window of
    a few dozen alerts, neighbouring thresholds differ by one or two alerts and the raw curve
    jumps by +-0.1, so a single lucky low threshold or a single dip high up must not decide the
    pick; pooled neighbours do. If none reaches the target: the lowest threshold of the smoothed
    curve's top (the start of its highest plateau), not the threshold of best *measured*
    precision: at the top of the curve a dozen alerts decide, and one lucky threshold with 16 of
    16 true alerts beside others at 0.85-0.89 is noise, not a better operating point (development
    seed 90210 picked 0.84 that way, where 0.34-0.59 held the same smoothed precision and
    caught half again as many calibration failures). With no supported threshold, ``inf``.
    ``rows``: node, ts, score."""
    scores = rows["score"].to_numpy()
    if candidates is None:
        pos = scores[scores > 0]
        if pos.size == 0:
            return float("inf")
        q = 1.0 - np.geomspace(0.5, 0.5 / max(pos.size, 2), 80)
        candidates = np.quantile(pos, q)
    cands = np.unique(np.asarray(candidates, dtype=float))
    # the alerting hours at the lowest candidate, sorted and joined to the failures once; each
    # candidate's episodes are then a filter of them (the same as ``alert_episodes``)
    finite = cands[np.isfinite(cands)]
    frac = min(1.0, clear_fraction)
    low = float(finite[0]) * frac if finite.size else 0.0
    on = _alerting(rows, low, failures) if finite.size and rows.height else None
    none = pl.DataFrame(schema=_ALERT_SCHEMA)
    sup = []
    for t in cands:
        live = on is not None and np.isfinite(t)
        episodes = _episodes(on, float(t), float(t) * frac) if live else none
        m = _episode_metrics(episodes, failures, horizon_h, window)
        if m["alerts"] >= min_alerts:
            sup.append((float(t), m["alerts"], m["precision"] or 0.0))
    if not sup:
        return float("inf")
    t_arr, n_arr, p_arr = (np.array(c, dtype=float) for c in zip(*sup, strict=True))
    smooth = IsotonicRegression(increasing=True).fit_transform(t_arr, p_arr, sample_weight=n_arr)
    reach = np.flatnonzero(smooth >= target_precision - 1e-12)
    if reach.size:
        return float(t_arr[reach[0]])
    return float(t_arr[int(np.flatnonzero(smooth >= smooth.max() - 1e-12)[0])])


def seen_share(
    rows: pl.DataFrame,
    failures: pl.DataFrame,
    *,
    horizon_h: float,
    window: tuple[datetime, datetime],
    level: float,
) -> tuple[float | None, int]:
    """The share of the failure episodes of ``window`` that the scores saw coming: their node
    scored above ``level`` at some hour of the horizon before them. Returns (share, episodes);
    share None when the window holds no failure. ``rows``: node, ts, score (out-of-fold, so the
    model never saw the failure it is scored for)."""
    h = timedelta(hours=horizon_h)
    f = failures.filter(pl.col("ts").is_between(*window)).select(
        pl.col("node").cast(pl.String), pl.col("ts").cast(pl.Datetime("us")).alias("fts")
    )
    if f.height == 0:
        return None, 0
    high = rows.filter(pl.col("score") > level).select(
        pl.col("node").cast(pl.String), pl.col("ts").cast(pl.Datetime("us"))
    )
    seen = (
        f.with_row_index("fid")
        .join(high, on="node", how="inner")
        .filter((pl.col("ts") < pl.col("fts")) & (pl.col("ts") >= pl.col("fts") - h))["fid"]
        .n_unique()
    )
    return seen / f.height, f.height


def precision_at_k(rows: pl.DataFrame, k: int) -> float | None:
    """Each day, the ``k`` nodes with the highest score that day (ties by name): the share of
    them with a failure within the horizon of a row that day. ``rows``: node, ts, score, label."""
    if rows.height == 0 or k <= 0:
        return None
    daily = (
        rows.group_by(pl.col("ts").dt.truncate("1d").alias("day"), "node")
        .agg(pl.col("score").max(), pl.col("label").max())
        .sort(["day", "score", "node"], descending=[False, True, False])
        .group_by("day", maintain_order=True)
        .head(k)
    )
    days = daily["day"].n_unique()
    return float(daily["label"].sum() / (k * days))


def metrics(
    rows: pl.DataFrame,
    failures: pl.DataFrame,
    *,
    threshold: float,
    horizon_h: float,
    k: int,
    window: tuple[datetime, datetime],
    clear: float | None = None,
) -> dict[str, float | None]:
    """The metric set ``M`` for one scorer (its alerts close below ``clear``: None, the
    threshold). ``rows``: node, ts, label, score; rows before ``window`` only feed alert
    episodes (the lead-in), never PR-AUC or precision@k."""
    inside = rows.filter(pl.col("ts").is_between(*window))
    labels = inside["label"].to_numpy()
    pr_auc = (
        float(average_precision_score(labels, inside["score"].to_numpy())) if labels.sum() else None
    )
    ep = episode_metrics(
        rows, failures, threshold=threshold, horizon_h=horizon_h, window=window, clear=clear
    )
    return {
        "pr_auc": _round(pr_auc),
        "precision": _round(ep["precision"]),
        "recall": _round(ep["recall"]),
        "precision_at_k": _round(precision_at_k(inside, k)),
        "median_lead_time_h": _round(ep["median_lead_time_h"]),
        "threshold": _round(threshold if np.isfinite(threshold) else None),
        "clear": _round(clear_level(threshold, clear) if np.isfinite(threshold) else None),
        "alerts": ep["alerts"],
        "true_alerts": ep["true_alerts"],
        "failure_episodes": ep["failure_episodes"],
        "caught": ep["caught"],
    }


def _round(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(float(x), nd)


def scorer_columns(frame: pl.DataFrame, model_scores: np.ndarray) -> dict[str, np.ndarray]:
    return {
        "model": model_scores,
        "rule_baseline": rule_score(frame),
        "lemon_baseline": lemon_score(frame),
    }


def evaluate_all(
    test: pl.DataFrame,
    model_scores: np.ndarray,
    failures: pl.DataFrame,
    *,
    thresholds: dict[str, float],
    horizon_h: float,
    k: int,
    window: tuple[datetime, datetime],
    clear: dict[str, float] | None = None,
) -> dict[str, dict]:
    """Model and both baselines on the same test rows, with their operating thresholds and
    clear levels (``clear``: by scorer; a scorer not in it closes at its threshold)."""
    base = test.select("node", "ts", "label")
    return {
        name: metrics(
            base.with_columns(pl.Series("score", s)),
            failures,
            threshold=thresholds[name],
            horizon_h=horizon_h,
            k=k,
            window=window,
            clear=(clear or {}).get(name),
        )
        for name, s in scorer_columns(test, model_scores).items()
    }


def baseline_thresholds(
    calib: pl.DataFrame,
    failures: pl.DataFrame,
    *,
    horizon_h: float,
    window: tuple[datetime, datetime],
    target_precision: float,
) -> dict[str, float]:
    """The rule fires at 1 (what SREs run); the lemon count's threshold is chosen on the
    calibration window like the model's (never below one failure)."""
    rows = calib.select("node", "ts").with_columns(pl.Series("score", lemon_score(calib)))
    lemon = choose_threshold(
        rows,
        failures,
        horizon_h=horizon_h,
        window=window,
        target_precision=target_precision,
        candidates=np.unique(rows["score"].to_numpy()),
    )
    return {"rule_baseline": 1.0, "lemon_baseline": max(1.0, lemon)}


# -- over seeds ------------------------------------------------------------------------------------

SEED_METRICS = ("pr_auc", "precision", "recall", "median_lead_time_h")


def mean_interval(values: list[float], level: float = 0.95) -> dict[str, float | int | None]:
    """Mean and Student-t ``level`` interval of the mean over independent runs (seeds)."""
    from scipy import stats

    x = np.asarray([v for v in values if v is not None], dtype=float)
    if x.size == 0:
        return {"mean": None, "lo": None, "hi": None, "n": 0}
    mean = float(x.mean())
    if x.size == 1:
        return {"mean": _round(mean), "lo": None, "hi": None, "n": 1}
    half = float(stats.t.ppf(0.5 + level / 2, x.size - 1) * x.std(ddof=1) / np.sqrt(x.size))
    return {"mean": _round(mean), "lo": _round(mean - half), "hi": _round(mean + half), "n": x.size}


def summarize_seeds(per_seed: list[dict[str, dict]]) -> dict[str, dict]:
    """Per scorer: mean and 95% interval over seeds of each metric in ``SEED_METRICS``, and the
    pooled precision / recall (alert and failure-episode counts summed over seeds).
    ``per_seed``: one ``evaluate_all`` result per seed."""
    out: dict[str, dict] = {}
    for name in per_seed[0] if per_seed else ():
        runs = [s[name] for s in per_seed]
        counts = {
            k: int(sum(r[k] for r in runs))
            for k in ("alerts", "true_alerts", "failure_episodes", "caught")
        }
        pooled = {
            "precision": _round(counts["true_alerts"] / counts["alerts"])
            if counts["alerts"]
            else None,
            "recall": _round(counts["caught"] / counts["failure_episodes"])
            if counts["failure_episodes"]
            else None,
            **counts,
        }
        out[name] = {
            "seeds": len(runs),
            **{m: mean_interval([r[m] for r in runs]) for m in SEED_METRICS},
            "pooled": pooled,
        }
    return out

"""Failure prediction from failure records alone: which units fail in the next horizon.

For a site that has no logs to learn warnings from, only its failure history (tickets, a public
trace: LANL's node records, ORNL Titan's GPU histories), the question is the same as the log
model's, asked of the records: given everything recorded before a time ``t``, which units fail
in ``[t, t + horizon)``?

**Units.** GPUs when the dataset's records name them (``lifetimes`` gives each unit's service
life: its first and last day, its batch), else nodes (``nodes``: first and last seen, the system
or partition as the batch). A unit is at risk at ``t`` while ``start <= t < end``.

**Failures.** The incident records that are failures (``models.reliability.failures``: not a
warning, not maintenance), of the unit (``incidents.gpu``) or of the node.

**Snapshots.** Rows at ``t = t0 + i * step`` for every unit at risk; every feature reads only
records before ``t``:

- the unit's own history: failures so far, in the last 30 / 365 days, hours since the last one
  (survival-style: time since last failure, failures so far, age);
- its age (hours since its start) and batch (an ordinal code of the batch name);
- its location: the node (slot) and the rack (cabinet) it is in - their failures so far and in
  the last 365 days, of any unit - and, for Cray names (``c<col>-<row>c<cage>s<slot>n<node>``),
  the parts of the name as numbers (cage and slot stand for height in the cabinet, hence air
  temperature). A unit's node is the one recorded for it in ``lifetimes`` (its last place; a
  unit's earlier stays are not in the database), or the node of its latest failure before ``t``.

**Split.** One time split: rows whose label window ends before ``split_at`` train, rows from
``split_at`` on (whose window ends before the data ends) test; ``split_at`` is the snapshot
time before which ``train_fraction`` of the rows lie (of the rows, not of the time: LANL's
largest systems came into production in the last third of its ten years).

**Scorers** on the same test rows: ``model`` (gradient-boosted trees, LightGBM, on all
features), ``survival`` (an elastic-net Cox proportional-hazards model, scikit-survival, on the
unit's own history and age, fitted to the time from each training snapshot to the next failure,
censored at the split), and the two baselines: ``lemon_baseline`` (the unit's failures so far,
Meta's lemon signal) and ``age_baseline`` (a one-feature LightGBM on age). Each reports PR-AUC
over the test rows and Harrell's concordance (scikit-survival's ``concordance_index_censored``)
of its score with the time from ``split_at`` to each unit's next failure, censored at the data's
end, over the units at risk at ``split_at``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import polars as pl
from sklearn.metrics import average_precision_score

from faultlens.ingest.errors import ModelError
from faultlens.ingest.store import Store

log = logging.getLogger(__name__)

DAY_H = 24.0
HOURS_SINCE_CAP = 10 * 8766.0
CRAY_NAME = r"^c(\d+)-(\d+)c(\d+)s(\d+)n(\d+)$"
OWN_FEATURES = ("fails_total", "fails_30d", "fails_365d", "hours_since_fail", "age_h")
FEATURES = (
    *OWN_FEATURES,
    "batch_code",
    "node_fails_total",
    "node_fails_365d",
    "rack_fails_total",
    "rack_fails_365d",
    "loc_col",
    "loc_row",
    "loc_cage",
    "loc_slot",
    "loc_node",
)
SCORERS = ("model", "survival", "lemon_baseline", "age_baseline")


@dataclass(frozen=True)
class History:
    """A dataset's units (unit, node, rack, batch, start, end) and failures (unit, node, rack,
    ts); ``unit_kind`` is ``gpu`` or ``node``."""

    dataset: str
    unit_kind: str
    units: pl.DataFrame
    failures: pl.DataFrame

    @property
    def window(self) -> tuple[datetime, datetime]:
        lo = min(self.units["start"].min(), self.failures["ts"].min())
        hi = max(self.units["end"].max(), self.failures["ts"].max())
        return lo, hi


def load_history(store: Store, dataset: str) -> History:
    """Units and failures of ``dataset`` from ``lifetimes`` / ``nodes`` and ``incidents``."""
    from faultlens.models.reliability import failures as failure_records

    racks = store.query(
        "SELECT node, any_value(rack) AS rack, any_value(partition) AS part FROM nodes "
        "WHERE dataset = ? GROUP BY node",
        [dataset],
    )
    life = store.query(
        'SELECT unit, node, batch, start, "end" FROM lifetimes WHERE dataset = ? '
        'AND start IS NOT NULL AND "end" IS NOT NULL',
        [dataset],
    )
    lo, hi = datetime(1900, 1, 1), datetime(2200, 1, 1)
    fails = failure_records(store, dataset, lo, hi)
    if life.height:
        kind = "gpu"
        ids = store.query(
            "SELECT node, gpu AS unit, start AS ts FROM incidents WHERE dataset = ? "
            "AND gpu IS NOT NULL",
            [dataset],
        )
        fails = fails.join(ids.unique(["node", "ts"]), on=["node", "ts"], how="inner")
        units = life
    else:
        kind = "node"
        units = store.query(
            "SELECT node AS unit, node, any_value(partition) AS batch, min(first_seen) AS start,"
            ' max(last_seen) AS "end" FROM nodes WHERE dataset = ? AND first_seen IS NOT NULL '
            "GROUP BY node",
            [dataset],
        )
        fails = fails.with_columns(pl.col("node").alias("unit"))
    if units.height == 0 or fails.height == 0:
        raise ModelError(f"dataset {dataset!r} has no units with failure records to learn from")
    rack = racks.select("node", pl.coalesce("rack", "part").alias("rack"))
    units = units.join(rack, on="node", how="left").select(
        "unit", "node", "rack", pl.col("batch").cast(pl.String), "start", "end"
    )
    fails = (
        fails.select("unit", "node", pl.col("ts").cast(pl.Datetime("us")))
        .join(rack, on="node", how="left")
        .sort("ts")
    )
    return History(
        dataset, kind, units.with_columns(pl.col("start", "end").cast(pl.Datetime("us"))), fails
    )


# -- snapshot features -----------------------------------------------------------------------------


def _counts_before(
    rows: pl.DataFrame, events: pl.DataFrame, key: str, at: pl.Expr, name: str
) -> pl.DataFrame:
    """``rows`` with ``name``: events of the row's ``key`` strictly before ``at``, and
    ``name + '_last'``: the time of the latest of them."""
    ev = (
        events.select(pl.col(key).alias("_k"), pl.col("ts").alias("_ets"))
        .drop_nulls()
        .sort("_k", "_ets")
        .with_columns(pl.int_range(1, pl.len() + 1).over("_k").alias("_n"))
        .sort("_ets")
    )
    out = rows.with_columns(at.alias("_at"), pl.col(key).alias("_k")).sort("_at")
    out = out.join_asof(
        ev,
        left_on="_at",
        right_on="_ets",
        by="_k",
        strategy="backward",
        allow_exact_matches=False,
        check_sortedness=False,
    )
    return out.with_columns(
        pl.col("_n").fill_null(0).cast(pl.Float32).alias(name),
        pl.col("_ets").alias(f"{name}_last"),
    ).drop("_at", "_k", "_ets", "_n")


def _next_failure(rows: pl.DataFrame, failures: pl.DataFrame) -> pl.DataFrame:
    """``rows`` with ``next_ts``: the unit's first failure at or after ``t``."""
    ev = failures.select(pl.col("unit").alias("_u"), pl.col("ts").alias("next_ts")).sort("next_ts")
    out = rows.with_columns(pl.col("unit").alias("_u")).sort("t")
    return out.join_asof(
        ev, left_on="t", right_on="next_ts", by="_u", strategy="forward", check_sortedness=False
    ).drop("_u")


def snapshots(hist: History, times: list[datetime]) -> pl.DataFrame:
    """One row per (unit at risk, time) with ``FEATURES``, ``next_ts`` (the unit's next failure)
    and ``end`` (its last day)."""
    grid = pl.DataFrame({"t": times}).with_columns(pl.col("t").cast(pl.Datetime("us")))
    rows = hist.units.join(grid, how="cross").filter(
        (pl.col("start") <= pl.col("t")) & (pl.col("t") < pl.col("end"))
    )
    f = hist.failures
    t = pl.col("t")
    rows = _counts_before(rows, f, "unit", t, "fails_total")
    rows = _counts_before(rows, f, "unit", t - timedelta(days=30), "_f30")
    rows = _counts_before(rows, f, "unit", t - timedelta(days=365), "_f365")
    # the node a unit is in: its latest failure's node before t, else the recorded one
    last_node = f.select(
        pl.col("unit").alias("_u"), pl.col("ts").alias("_lts"), pl.col("node").alias("_ln")
    ).sort("_lts")
    rows = (
        rows.with_columns(pl.col("unit").alias("_u"))
        .sort("t")
        .join_asof(
            last_node,
            left_on="t",
            right_on="_lts",
            by="_u",
            strategy="backward",
            allow_exact_matches=False,
            check_sortedness=False,
        )
        .with_columns(pl.coalesce("_ln", "node").alias("node"))
        .drop("_u", "_lts", "_ln")
    )
    rows = _counts_before(rows, f, "node", t, "node_fails_total")
    rows = _counts_before(rows, f, "node", t - timedelta(days=365), "_n365")
    rows = _counts_before(rows, f, "rack", t, "rack_fails_total")
    rows = _counts_before(rows, f, "rack", t - timedelta(days=365), "_r365")
    parts = pl.col("node").str.extract_groups(CRAY_NAME)
    batches = sorted(hist.units["batch"].drop_nulls().unique().to_list())
    since = (t - pl.col("fails_total_last")).dt.total_seconds() / 3600.0
    rows = rows.with_columns(
        (pl.col("fails_total") - pl.col("_f30")).alias("fails_30d"),
        (pl.col("fails_total") - pl.col("_f365")).alias("fails_365d"),
        since.fill_null(HOURS_SINCE_CAP)
        .clip(upper_bound=HOURS_SINCE_CAP)
        .alias("hours_since_fail"),
        ((t - pl.col("start")).dt.total_seconds() / 3600.0).alias("age_h"),
        pl.col("batch")
        .replace_strict(batches, list(range(len(batches))), default=None, return_dtype=pl.Float32)
        .alias("batch_code"),
        (pl.col("node_fails_total") - pl.col("_n365")).alias("node_fails_365d"),
        (pl.col("rack_fails_total") - pl.col("_r365")).alias("rack_fails_365d"),
        *(
            parts.struct.field(str(i + 1)).cast(pl.Float32, strict=False).alias(name)
            for i, name in enumerate(("loc_col", "loc_row", "loc_cage", "loc_slot", "loc_node"))
        ),
    )
    rows = _next_failure(rows, f)
    return rows.select(
        "unit", "node", "t", "end", "next_ts", *(pl.col(c).cast(pl.Float32) for c in FEATURES)
    ).sort("t", "unit")


# -- training and evaluation ----------------------------------------------------------------------


@dataclass(frozen=True)
class RecordsConfig:
    horizon_h: float = 30 * DAY_H
    step_h: float | None = None  # snapshot spacing; default max(horizon, 7 days)
    train_fraction: float = 0.7
    max_train_rows: int = 400_000
    max_survival_rows: int = 50_000
    seed: int = 0


def snapshot_times(lo: datetime, hi: datetime, step_h: float) -> list[datetime]:
    step = timedelta(hours=step_h)
    n = int((hi - lo) / step)
    return [lo + step * (i + 1) for i in range(n)]


def _label(rows: pl.DataFrame, horizon_h: float) -> np.ndarray:
    ahead = (rows["next_ts"] - rows["t"]).dt.total_seconds() / 3600.0
    return (ahead < horizon_h).fill_null(False).to_numpy().astype(np.int8)


def _lgbm(X: np.ndarray, y: np.ndarray, w: np.ndarray, seed: int) -> Any:
    """Gradient-boosted trees for ranking (no calibration: the metrics are rank-based). Leaves
    of at least 200 rows: on Titan the log model's estimator (50-row leaves, a fifth of the
    rows held out for its calibration) scored PR-AUC 0.009 against 0.022 for these."""
    import lightgbm as lgb

    est = lgb.LGBMClassifier(
        n_estimators=200,
        learning_rate=0.05,
        num_leaves=15,
        min_child_samples=200,
        colsample_bytree=0.8,
        random_state=seed,
        n_jobs=1,
        verbose=-1,
    )
    return est.fit(X, y, sample_weight=w)


def _sample(n_pos: np.ndarray, limit: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Every positive, negatives down-sampled to about ``limit`` rows, weighted back."""
    pos = n_pos.astype(bool)
    keep = min(1.0, max(limit - int(pos.sum()), 1) / max(int((~pos).sum()), 1))
    pick = pos | (np.random.default_rng(seed).random(pos.size) < keep)
    return pick, np.where(pos[pick], 1.0, 1.0 / keep)


def _cox(train: pl.DataFrame, split_at: datetime, limit: int, seed: int) -> Any:
    """Cox proportional hazards on the unit's own history: time from each training snapshot to
    the next failure, censored at ``split_at`` (or the unit's end)."""
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sksurv.linear_model import CoxnetSurvivalAnalysis
    from sksurv.util import Surv

    split = pl.lit(split_at).cast(pl.Datetime("us"))
    stop = pl.min_horizontal(pl.col("end"), split)
    event = pl.col("next_ts").is_not_null() & (pl.col("next_ts") < stop)
    till = pl.when(event).then(pl.col("next_ts")).otherwise(stop)
    frame = train.with_columns(
        event.alias("_e"), ((till - pl.col("t")).dt.total_seconds() / 3600.0).alias("_d")
    ).filter(pl.col("_d") > 0)
    if frame.height > limit:
        frame = frame.sample(limit, seed=seed)
    X = _cox_x(frame)
    y = Surv.from_arrays(frame["_e"].to_numpy(), frame["_d"].to_numpy())
    # elastic-net Cox by coordinate descent: plain Newton (CoxPHSurvivalAnalysis) overflowed on
    # Titan's 100,000 rows and stopped at zero coefficients
    cox = CoxnetSurvivalAnalysis(l1_ratio=0.5, alphas=[0.01])
    return make_pipeline(StandardScaler(), cox).fit(X, y)


def _cox_x(frame: pl.DataFrame) -> np.ndarray:
    """Log-scaled own-history features (counts and hours), so the hazard ratios stay finite."""
    return np.log1p(frame.select(OWN_FEATURES).to_numpy().astype(np.float64).clip(min=0))


def _concordance(at_split: pl.DataFrame, score: np.ndarray, hi: datetime) -> float | None:
    from sksurv.metrics import concordance_index_censored

    if at_split.height < 2:
        return None
    end = pl.lit(hi).cast(pl.Datetime("us"))
    event = pl.col("next_ts").is_not_null() & (pl.col("next_ts") < end)
    frame = at_split.with_columns(event.alias("_e"))
    till = pl.when(pl.col("_e")).then(pl.col("next_ts")).otherwise(end)
    hours = frame.select((till - pl.col("t")).dt.total_seconds() / 3600.0).to_series().to_numpy()
    e = frame["_e"].to_numpy()
    if not e.any():
        return None
    return round(float(concordance_index_censored(e, hours, score)[0]), 4)


def train_records_model(store: Store, dataset: str, cfg: RecordsConfig | None = None) -> dict:
    """Fit and evaluate every scorer on the time split (module doc); JSON-ready result."""
    cfg = cfg or RecordsConfig()
    hist = load_history(store, dataset)
    lo, hi = hist.window
    step_h = cfg.step_h or max(cfg.horizon_h, 7 * DAY_H)
    rows = snapshots(hist, snapshot_times(lo, hi, step_h))
    split_at = rows["t"].sort()[int(rows.height * cfg.train_fraction)]
    h = timedelta(hours=cfg.horizon_h)
    train = rows.filter(pl.col("t") + h <= split_at)
    test = rows.filter((pl.col("t") >= split_at) & (pl.col("t") + h <= hi))
    y_tr, y_te = _label(train, cfg.horizon_h), _label(test, cfg.horizon_h)
    if y_tr.sum() == 0 or y_te.sum() == 0:
        raise ModelError(f"no failure in the {'training' if y_tr.sum() == 0 else 'test'} rows")
    pick, w = _sample(y_tr, cfg.max_train_rows, cfg.seed)
    fit_rows = train.filter(pl.Series(pick))
    X = fit_rows.select(FEATURES).to_numpy()
    model = _lgbm(X, y_tr[pick], w, cfg.seed)
    age_i = FEATURES.index("age_h")
    age = _lgbm(X[:, [age_i]], y_tr[pick], w, cfg.seed)
    cox = _cox(train, split_at, cfg.max_survival_rows, cfg.seed)

    def scores(frame: pl.DataFrame) -> dict[str, np.ndarray]:
        Xf = frame.select(FEATURES).to_numpy()
        return {
            "model": model.predict_proba(Xf)[:, 1],
            "survival": cox.predict(_cox_x(frame)),
            "lemon_baseline": frame["fails_total"].to_numpy().astype(np.float64),
            "age_baseline": age.predict_proba(Xf[:, [age_i]])[:, 1],
        }

    test_scores = scores(test)
    at_split = test.filter(pl.col("t") == split_at)
    split_scores = scores(at_split)
    metrics = {
        name: {
            "pr_auc": round(float(average_precision_score(y_te, s)), 4),
            "concordance": _concordance(at_split, split_scores[name], hi),
        }
        for name, s in test_scores.items()
    }
    gain = model.booster_.feature_importance(importance_type="gain")
    top = sorted(zip(FEATURES, gain.tolist(), strict=True), key=lambda x: -x[1])[:8]
    return {
        "dataset": dataset,
        "unit": hist.unit_kind,
        "horizon_h": cfg.horizon_h,
        "step_h": step_h,
        "window": [lo.isoformat(), hi.isoformat()],
        "split_at": split_at.isoformat(),
        "rows": {"train": train.height, "test": test.height},
        "positives": {"train": int(y_tr.sum()), "test": int(y_te.sum())},
        "prevalence_test": round(float(y_te.mean()), 5),
        "units_at_split": at_split.height,
        "metrics": metrics,
        "top_features": [{"feature": f, "gain": round(g, 1)} for f, g in top],
        "survival_coef": dict(
            zip(OWN_FEATURES, np.round(cox[-1].coef_.ravel(), 4).tolist(), strict=True)
        ),
    }

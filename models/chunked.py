"""Training in node groups: the same model as ``train_failure_model`` in bounded memory.

The unchunked path holds one dense node x hour grid of the whole history and the full
calibration and test windows' feature tables (``models.plan``: about 35 GB for 10 years x 1,500
nodes). Here the grid is built for a group of nodes at a time (``FeatureGrid(nodes=...)``, whose
queries read only those nodes), in two passes:

1. per group: the training rows (every positive, negatives sampled at one fleet-wide rate to
   about ``max_train_rows``) and the calibrator's rows (the calibration window, negatives sampled
   to about ``max_calib_rows``), features kept; then the model is fitted on them, and (with
   ``refit``) its trees again on both sets of rows, the calibrator kept;
2. per group again: the calibration and test windows' rows, scored and kept in a compact form
   (node, time, label, score and the two baselines' columns), features dropped: the calibration
   window by the trees fitted on the training rows alone, the test window by the refitted ones.

With cross-fitting (``TrainConfig.cross_fit_folds``, ``models.crossfit``), pass 1 keeps the
sampled rows of the whole fitting span instead; one estimator per fold of nodes and the deployed
trees are fitted on them; pass 2 scores each node's span rows with its fold's trees (out of fold)
and the test rows with the deployed ones, and the calibrator is fitted on the out-of-fold rows.

Thresholds, baselines and metrics are then computed on the compact rows exactly as the
unchunked path does. What differs: negatives are sampled at a rate set from the fleet's row
count (not its exact negative count), and per group with its own random stream; with one group
and no sampling both paths fit on the same rows. The peak is one group's grid and tables plus
the sampled rows and the compact rows; ``plan.chunked_group_size`` picks the largest group that
fits the memory limit.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import polars as pl

from faultlens.ingest.errors import ModelError
from faultlens.ingest.store import Store
from faultlens.models.crossfit import (
    calibrated,
    compact,
    fit_folds,
    margins,
    node_folds,
    oof_window,
    platt,
    row_folds,
    span_window,
    usable,
)
from faultlens.models.evaluate import (
    LEMON_COLUMN,
    Split,
    metrics,
    time_split,
)
from faultlens.models.feature_catalog import FEATURES
from faultlens.models.features import FeatureGrid, floor_hour, node_universe, stack_features
from faultlens.models.plan import check_chunked_plan, plan_training

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GridShape:
    """What the model card needs of a grid (``predictor._card``), for all groups together."""

    start: datetime
    end: datetime
    nodes: list[str]
    episodes: pl.DataFrame


def node_group_for(store: Store, lo: datetime, hi: datetime, cfg: Any) -> int | None:
    """The node-group size to train with: ``cfg.node_group`` when set; None (unchunked) when the
    unchunked plan fits ``cfg.max_memory_gb``; else the largest group that fits, or
    ``ConfigError`` (with the ``--since`` that fits) when not even one node does."""
    if cfg.node_group:
        return int(cfg.node_group)
    fractions = {
        "test_fraction": cfg.test_fraction,
        "calib_fraction": cfg.calib_fraction,
        "folds": cfg.cross_fit_folds,
    }
    nodes = len(node_universe(store, floor_hour(lo), hi))
    plan = plan_training(nodes, lo, hi, limit_gb=cfg.max_memory_gb, **fractions)
    if plan.fits:
        return None
    group = check_chunked_plan(
        plan,
        hi,
        max_train_rows=cfg.max_train_rows,
        max_calib_rows=cfg.max_calib_rows,
        max_oof_rows=cfg.max_oof_rows,
        **fractions,
    )
    log.info(
        "the unchunked plan needs about %.1f GB (limit %g GB): training in groups of %d nodes",
        plan.estimate_gb,
        cfg.max_memory_gb,
        group,
    )
    return group


def _groups(nodes: list[str], size: int) -> list[list[str]]:
    return [nodes[i : i + size] for i in range(0, len(nodes), max(size, 1))]


def _window_masks(
    grid: FeatureGrid,
    split: Split,
    horizon_h: float,
    oof: tuple[datetime, datetime] | None = None,
) -> dict[str, np.ndarray]:
    """Per window, the labelable rows (calibration and test with a horizon of lead-in, as in
    ``predictor._masks``), ``calib_fit``: the calibration window proper, ``span``: the
    cross-fitting span (``crossfit.span_window``) and ``oof``: its scored part."""
    times = grid.row_times()
    h = np.timedelta64(int(round(horizon_h * 3600)), "s")
    bounds = {
        "train": split.train,
        "calib": split.calib,
        "test": split.test,
        "calib_fit": split.calib,
        "span": span_window(split),
        "oof": oof or span_window(split),
    }
    out = {}
    for name, (lo, hi) in bounds.items():
        lead = name in ("calib", "test")
        lo64 = np.datetime64(lo, "us") - (h if lead else np.timedelta64(0, "s"))
        inside = (times >= lo64) & (times <= np.datetime64(hi, "us")) & grid.labelable
        out[name] = np.broadcast_to(inside, grid.shape)
    return out


def _rate(limit: int, rows: int) -> float:
    return min(1.0, limit / max(rows, 1))


def _sampled(mask: np.ndarray, labels: np.ndarray, keep: float, rng: np.random.Generator):
    if keep >= 1.0:
        return mask.copy()
    return mask & (labels | (rng.random(mask.shape, dtype=np.float32) < keep))


@dataclass
class _Plan:
    """What both passes of a chunked run share."""

    lo: datetime
    hi: datetime
    nodes: list[str]
    group: int
    groups: list[list[str]]
    split: Split
    keep_train: float
    keep_calib: float
    grid_end: datetime
    oof: tuple[datetime, datetime]  # the cross-fitting's scored window (crossfit.oof_window)


def train_chunked(
    store: Store,
    lo: datetime,
    hi: datetime,
    cfg: Any,
    group: int,
    *,
    created: datetime,
    client: Any = None,
) -> Any:
    """``train_failure_model`` on ``[lo, hi]`` in node groups of ``group`` (see the module doc);
    returns its ``TrainResult``."""
    nodes = node_universe(store, floor_hour(lo), hi)
    probe = FeatureGrid(store, lo, hi, horizon_h=cfg.horizon_h, nodes=nodes[:1])
    split = time_split(
        probe.start,
        probe.end,
        cfg.horizon_h,
        test_fraction=cfg.test_fraction,
        calib_fraction=cfg.calib_fraction,
        warmup_h=cfg.warmup_h,
    )
    times = _window_masks(probe, split, cfg.horizon_h)
    plan = _Plan(
        lo,
        hi,
        nodes,
        group,
        _groups(nodes, group),
        split,
        _rate(cfg.max_train_rows, len(nodes) * int(times["train"][0].sum())),
        _rate(cfg.max_calib_rows, len(nodes) * int(times["calib_fit"][0].sum())),
        probe.end,
        oof_window(split, len(nodes), cfg.max_oof_rows),
    )
    del probe
    log.info("chunked training: %d nodes in %d groups of %d", len(nodes), len(plan.groups), group)
    fitted = None
    if cfg.cross_fit_folds >= 2 and len(nodes) >= cfg.cross_fit_folds:
        fitted = _cross_fitted(store, cfg, plan, client)
    if fitted is None:
        fitted = _time_split_fitted(store, cfg, plan, client)
    return _result(cfg, plan, fitted, created, client)


def _sampled_rows(
    store: Store, cfg: Any, plan: _Plan, picks: dict[str, tuple[str, float]]
) -> tuple[dict[str, pl.DataFrame], pl.DataFrame]:
    """Pass 1: per group, the rows of each window in ``picks`` (name -> (window mask, keep
    rate)) with their features, negatives sampled; and every group's failure episodes."""
    parts: dict[str, list[pl.DataFrame]] = {name: [] for name in picks}
    episodes = []
    for gi, names in enumerate(plan.groups):
        grid = FeatureGrid(store, plan.lo, plan.hi, horizon_h=cfg.horizon_h, nodes=names)
        masks = _window_masks(grid, plan.split, cfg.horizon_h, plan.oof)
        rng = np.random.default_rng([cfg.seed, gi])
        picked = {
            name: _sampled(masks[window], grid.labels, keep, rng)
            for name, (window, keep) in picks.items()
        }
        for name, table in grid.table(picked).items():
            parts[name].append(table)
        episodes.append(grid.episodes)
        del grid, masks
    all_episodes = pl.concat(episodes).sort("node", "ts")
    all_episodes = all_episodes.with_columns(pl.col("node").cast(pl.Enum(plan.nodes)))
    return {name: pl.concat(p) for name, p in parts.items()}, all_episodes


def _scored_rows(
    store: Store, cfg: Any, plan: _Plan, scorers: dict[str, Callable[[pl.DataFrame], np.ndarray]]
) -> dict[str, pl.DataFrame]:
    """Pass 2: per group, every row of each window in ``scorers`` (window -> margin function),
    kept in compact form (``crossfit.compact``: margins, features dropped)."""
    node_type = pl.Enum(plan.nodes)  # 4 bytes a row, sorted like the names
    out: dict[str, list[pl.DataFrame]] = {w: [] for w in scorers}
    for names in plan.groups:
        grid = FeatureGrid(store, plan.lo, plan.hi, horizon_h=cfg.horizon_h, nodes=names)
        masks = _window_masks(grid, plan.split, cfg.horizon_h, plan.oof)
        for window, margin_of in scorers.items():
            table = grid.table({window: masks[window]})[window]
            out[window].append(compact(table, margin_of(table), node_type))
            del table
        del grid, masks
    return {w: pl.concat(parts) for w, parts in out.items()}


def _no_failure_check(tables: dict[str, pl.DataFrame], episodes: pl.DataFrame) -> None:
    for name, t in tables.items():
        if t["label"].sum() == 0:
            raise ModelError(
                f"no failure in the {name} window ({episodes.height} failure "
                "episodes in all): more history is needed to train"
            )


@dataclass
class _Fitted:
    """A chunked fit: the deployed estimator and the compact scored rows."""

    deployed: Any
    calib: pl.DataFrame  # the rows the calibrator and the thresholds were fitted on, scored
    test: pl.DataFrame
    episodes: pl.DataFrame
    counts: dict[str, tuple[int, int]]
    window: tuple[datetime, datetime]  # ``calib``'s window
    crossed: bool


def _time_split_fitted(store: Store, cfg: Any, plan: _Plan, client: Any) -> _Fitted:
    """Trees on the training window's sampled rows, calibrator on the calibration window's;
    with ``refit`` the trees again on both, the calibrator kept. The calibration window is
    scored by the trees that did not see it (the thresholds' rows), the test by the deployed."""
    rows, episodes = _sampled_rows(
        store,
        cfg,
        plan,
        {"train": ("train", plan.keep_train), "calib_fit": ("calib_fit", plan.keep_calib)},
    )
    train, fit_cal = rows.pop("train"), rows.pop("calib_fit")
    _no_failure_check({"training": train, "calibration": fit_cal}, episodes)
    y, y_cal = train["label"].to_numpy(), fit_cal["label"].to_numpy()
    w = np.where(y > 0, 1.0, 1.0 / plan.keep_train)
    w_cal = np.where(y_cal > 0, 1.0, 1.0 / plan.keep_calib)
    est = _fit(
        cfg,
        train.select(FEATURES).to_numpy(),
        y,
        w,
        fit_cal.select(FEATURES).to_numpy(),
        y_cal,
        w_cal,
        client,
    )
    counts = {"train": (train.height, int(y.sum()))}
    # with refit, the trees again on both windows' sampled rows, the calibrator kept; the tables
    # are dropped first, so the fit holds the array and LightGBM's bins only
    X = stack_features([train, fit_cal]) if cfg.refit else None
    del train, fit_cal
    deployed = est
    if X is not None:
        y_all, w_all = np.concatenate([y, y_cal]), np.concatenate([w, w_cal])
        deployed = est.refit_trees(X, y_all, w_all, dask_client=client)
        del X
    scored = _scored_rows(
        store,
        cfg,
        plan,
        {"calib": lambda t: margins(est, t), "test": lambda t: margins(deployed, t)},
    )
    calib, test = (calibrated(scored[w], est.calibrator_) for w in ("calib", "test"))
    return _Fitted(deployed, calib, test, episodes, counts, plan.split.calib, False)


def _cross_fitted(store: Store, cfg: Any, plan: _Plan, client: Any) -> _Fitted | None:
    """Cross-fitting (``models.crossfit``) in node groups: the span's sampled rows gathered
    from every group, one estimator per fold and the deployed trees fitted on them; pass 2
    scores each node's span rows with its fold's trees and the test rows with the deployed
    ones; the calibrator is fitted on the out-of-fold margins. None when ``crossfit.usable``
    says no (the caller then runs the time split)."""
    from faultlens.models.predictor import _estimator

    rows, episodes = _sampled_rows(store, cfg, plan, {"fit": ("span", plan.keep_train)})
    fit = rows.pop("fit")
    folds = int(cfg.cross_fit_folds)
    folds_of = node_folds(plan.nodes, folds)
    row_fold = row_folds(fit["node"], folds_of)
    y = fit["label"].to_numpy()
    if not usable(plan.nodes, y, row_fold, folds):
        return None
    w = np.where(y > 0, 1.0, 1.0 / plan.keep_train)
    X = stack_features([fit])
    counts = {"train": (fit.height, int(y.sum()))}
    del fit
    make = functools.partial(_estimator, cfg, calibration_fraction=0.0)
    models = fit_folds(make, X, y, w, row_fold, folds, client)
    deployed = make().fit(X, y, sample_weight=w, dask_client=client)
    del X

    def out_of_fold(table: pl.DataFrame) -> np.ndarray:
        fold = row_folds(table["node"], folds_of)
        out = np.zeros(table.height)
        for g, model in enumerate(models):
            at = np.flatnonzero(fold == g)
            if at.size:
                out[at] = margins(model, table[at])
        return out

    scored = _scored_rows(
        store, cfg, plan, {"oof": out_of_fold, "test": lambda t: margins(deployed, t)}
    )
    cal = platt(
        scored["oof"]["margin"].to_numpy(),
        scored["oof"]["label"].to_numpy(),
        cfg.max_calib_rows,
        cfg.seed,
    )
    deployed.calibrator_ = cal
    calib, test = calibrated(scored["oof"], cal), calibrated(scored["test"], cal)
    return _Fitted(deployed, calib, test, episodes, counts, plan.oof, True)


def _result(cfg: Any, plan: _Plan, fitted: _Fitted, created: datetime, client: Any) -> Any:
    """Thresholds, baselines, metrics and the model card from the compact scored rows, as the
    unchunked path computes them."""
    from faultlens.models.predictor import (
        TrainResult,
        _card,
        calibration_note,
        pick_thresholds,
    )

    calib, test, episodes, counts = fitted.calib, fitted.test, fitted.episodes, fitted.counts
    counts["calib"] = (calib.height, int(calib["label"].sum()))
    counts["test"] = (test.height, int(test["label"].sum()))
    thresholds, baselines, floor_note = pick_thresholds(calib, episodes, fitted.window, cfg)
    k = cfg.k or max(1, round(0.01 * len(plan.nodes)))
    found = _evaluate(
        test,
        episodes,
        {"model": thresholds.drain_after_jobs, **baselines},
        cfg.horizon_h,
        k,
        plan.split,
        {"model": thresholds.hold},
    )
    start = floor_hour(plan.lo)
    shape = GridShape(
        start, plan.grid_end, plan.nodes, episodes.with_columns(pl.col("node").cast(pl.String))
    )
    how = calibration_note(cfg, fitted.window, fitted.crossed, floor_note)
    card = _card(
        shape, plan.split, cfg, fitted.deployed, thresholds, found, counts, k, created, how
    )
    card["chunked"] = {"node_group": plan.group, "groups": len(plan.groups)}
    if client is not None:
        from faultlens.models.dask_train import worker_count

        card["trained_on"] = {"dask_workers": worker_count(client)}
    return TrainResult(fitted.deployed, thresholds, plan.split, found, card)


def _evaluate(
    test: pl.DataFrame,
    episodes: pl.DataFrame,
    thresholds: dict[str, float],
    horizon_h: float,
    k: int,
    split: Split,
    clear: dict[str, float],
) -> dict[str, dict]:
    """``evaluate.evaluate_all`` on the compact rows: the model and both baselines."""
    base = test.select("node", "ts", "label")
    columns = {"model": "score", "rule_baseline": "rule", "lemon_baseline": LEMON_COLUMN}
    return {
        name: metrics(
            base.with_columns(test[col].cast(pl.Float64).alias("score")),
            episodes,
            threshold=thresholds[name],
            horizon_h=horizon_h,
            k=k,
            window=split.test,
            clear=clear.get(name),
        )
        for name, col in columns.items()
    }


def _fit(
    cfg: Any,
    X: np.ndarray,
    y: np.ndarray,
    w: np.ndarray,
    X_cal: np.ndarray,
    y_cal: np.ndarray,
    w_cal: np.ndarray,
    client: Any,
) -> Any:
    """The estimator ``predictor._fit`` builds, fitted on already sampled rows and weights."""
    from faultlens.models.feature_catalog import monotone_constraints
    from faultlens.models.predictor import FailurePredictor

    params = {"n_jobs": cfg.n_jobs, **cfg.params}
    if cfg.monotone:
        params.setdefault("monotone_constraints", monotone_constraints())
    est = FailurePredictor(random_state=cfg.seed, **params)
    return est.fit(
        X, y, sample_weight=w, X_calib=X_cal, y_calib=y_cal, calib_weight=w_cal, dask_client=client
    )

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

Thresholds, baselines and metrics are then computed on the compact rows exactly as the
unchunked path does. What differs: negatives are sampled at a rate set from the fleet's row
count (not its exact negative count), and per group with its own random stream; with one group
and no sampling both paths fit on the same rows. The peak is one group's grid and tables plus
the sampled rows and the compact rows; ``plan.chunked_group_size`` picks the largest group that
fits the memory limit.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import polars as pl

from faultlens.ingest.errors import ModelError
from faultlens.ingest.store import Store
from faultlens.models.evaluate import (
    LEMON_COLUMN,
    Split,
    metrics,
    rule_score,
    time_split,
)
from faultlens.models.feature_catalog import FEATURES
from faultlens.models.features import FeatureGrid, floor_hour, node_universe
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
    fractions = {"test_fraction": cfg.test_fraction, "calib_fraction": cfg.calib_fraction}
    nodes = len(node_universe(store, floor_hour(lo), hi))
    plan = plan_training(nodes, lo, hi, limit_gb=cfg.max_memory_gb, **fractions)
    if plan.fits:
        return None
    group = check_chunked_plan(
        plan,
        hi,
        max_train_rows=cfg.max_train_rows,
        max_calib_rows=cfg.max_calib_rows,
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


def _window_masks(grid: FeatureGrid, split: Split, horizon_h: float) -> dict[str, np.ndarray]:
    """Per window, the labelable rows (calibration and test with a horizon of lead-in, as in
    ``predictor._masks``), and ``calib_fit``: the calibration window proper."""
    times = grid.row_times()
    h = np.timedelta64(int(round(horizon_h * 3600)), "s")
    out = {}
    for name in ("train", "calib", "test", "calib_fit"):
        lo, hi = getattr(split, "calib" if name == "calib_fit" else name)
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
    from faultlens.models.predictor import (
        TrainResult,
        _card,
        _score,
        pick_thresholds,
        stack_features,
    )

    start = floor_hour(lo)
    nodes = node_universe(store, start, hi)
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
    keep_train = _rate(cfg.max_train_rows, len(nodes) * int(times["train"][0].sum()))
    keep_calib = _rate(cfg.max_calib_rows, len(nodes) * int(times["calib_fit"][0].sum()))
    grid_end = probe.end
    del probe
    groups = _groups(nodes, group)
    log.info("chunked training: %d nodes in %d groups of %d", len(nodes), len(groups), group)
    train_parts, fit_parts, episodes = [], [], []
    for gi, names in enumerate(groups):  # pass 1: sampled rows with their features
        grid = FeatureGrid(store, lo, hi, horizon_h=cfg.horizon_h, nodes=names)
        masks = _window_masks(grid, split, cfg.horizon_h)
        rng = np.random.default_rng([cfg.seed, gi])
        picked = {
            "train": _sampled(masks["train"], grid.labels, keep_train, rng),
            "calib_fit": _sampled(masks["calib_fit"], grid.labels, keep_calib, rng),
        }
        tables = grid.table(picked)
        train_parts.append(tables["train"])
        fit_parts.append(tables["calib_fit"])
        episodes.append(grid.episodes)
        del grid, masks, tables
    train = pl.concat(train_parts)
    fit_cal = pl.concat(fit_parts)
    del train_parts, fit_parts
    all_episodes = pl.concat(episodes).sort("node", "ts")
    all_episodes = all_episodes.with_columns(pl.col("node").cast(pl.Enum(nodes)))
    for name, t in (("training", train), ("calibration", fit_cal)):
        if t["label"].sum() == 0:
            raise ModelError(
                f"no failure in the {name} window ({all_episodes.height} failure "
                "episodes in all): more history is needed to train"
            )
    y = train["label"].to_numpy()
    y_cal = fit_cal["label"].to_numpy()
    est = _fit(
        cfg,
        train.select(FEATURES).to_numpy(),
        y,
        np.where(y > 0, 1.0, 1.0 / keep_train),
        fit_cal.select(FEATURES).to_numpy(),
        y_cal,
        np.where(y_cal > 0, 1.0, 1.0 / keep_calib),
        client,
    )
    counts = {"train": (train.height, int(y.sum()))}
    # with refit, the trees again on both windows' sampled rows, the calibrator kept; the tables
    # are dropped first, so the fit holds the array and LightGBM's bins only
    X = stack_features([train, fit_cal]) if cfg.refit else None
    del train, fit_cal
    deployed = est
    if X is not None:
        w = np.where(y > 0, 1.0, 1.0 / keep_train), np.where(y_cal > 0, 1.0, 1.0 / keep_calib)
        deployed = est.refit_trees(
            X, np.concatenate([y, y_cal]), np.concatenate(w), dask_client=client
        )
        del X
    compact: dict[str, list[pl.DataFrame]] = {"calib": [], "test": []}
    node_type = pl.Enum(nodes)  # 4 bytes a row, sorted like the names
    # pass 2: every calibration and test row, scored, features dropped; the calibration window
    # by the trees that did not see it (the thresholds' rows), the test window by the deployed
    scorer = {"calib": est, "test": deployed}
    for names in groups:
        grid = FeatureGrid(store, lo, hi, horizon_h=cfg.horizon_h, nodes=names)
        masks = _window_masks(grid, split, cfg.horizon_h)
        for window in ("calib", "test"):
            table = grid.table({window: masks[window]})[window]
            compact[window].append(_compact(table, _score(scorer[window], table), node_type))
            del table
        del grid, masks
    calib = pl.concat(compact.pop("calib"))
    test = pl.concat(compact.pop("test"))
    counts["calib"] = (calib.height, int(calib["label"].sum()))
    counts["test"] = (test.height, int(test["label"].sum()))
    thresholds, baselines = pick_thresholds(calib, all_episodes, split, cfg)
    k = cfg.k or max(1, round(0.01 * len(nodes)))
    found = _evaluate(
        test,
        all_episodes,
        {"model": thresholds.drain_after_jobs, **baselines},
        cfg.horizon_h,
        k,
        split,
    )
    shape = GridShape(
        start, grid_end, nodes, all_episodes.with_columns(pl.col("node").cast(pl.String))
    )
    card = _card(shape, split, cfg, deployed, thresholds, found, counts, k, created)
    card["chunked"] = {"node_group": group, "groups": len(groups)}
    if client is not None:
        from faultlens.models.dask_train import worker_count

        card["trained_on"] = {"dask_workers": worker_count(client)}
    return TrainResult(deployed, thresholds, split, found, card)


def _compact(table: pl.DataFrame, scores: np.ndarray, node_type: pl.Enum) -> pl.DataFrame:
    """A scored row without its features: node, ts, label, the model's score and the two
    baselines' (``evaluate.rule_score``, and the lemon count under its own column name, which
    ``baseline_thresholds`` reads)."""
    return pl.DataFrame(
        [
            table["node"].cast(node_type),
            table["ts"],
            table["label"].cast(pl.Int8),
            pl.Series("score", scores),
            pl.Series("rule", rule_score(table), dtype=pl.Float32),
            table[LEMON_COLUMN].cast(pl.Float32),
        ]
    )


def _evaluate(
    test: pl.DataFrame,
    episodes: pl.DataFrame,
    thresholds: dict[str, float],
    horizon_h: float,
    k: int,
    split: Split,
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

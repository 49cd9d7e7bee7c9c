"""Cross-fitting by node groups: the calibrator and the operating threshold from out-of-fold
scores over the training and calibration windows, not from the calibration window alone.

With a time split alone, the calibrator and the threshold are fitted on one quarter of the
history (``evaluate.time_split``'s calibration window) scored by trees that never saw it. On a
256-node cluster that window holds a few dozen alert episodes, so a handful of them set the
threshold: on the held-out evaluation lists the pick ranged from the 0.3 floor (test precision
0.56) to 0.82 (precision 1.0 and a third of the warned failures caught).

Here the nodes are dealt into ``folds`` groups (the ``i``-th node of the sorted list into group
``i mod folds``). For each group, trees are fitted on the other groups' rows of the whole
fitting span (the training window, the gap after it and the calibration window: labels there
never read into the test window, which stays a horizon away) and score that group's rows. Every
row of the span then has a score from trees that never saw its node: about three times the
calibration window's rows and alert episodes, over every node. The Platt calibrator and the
thresholds are fitted on those out-of-fold scores; the deployed trees are fitted on all of the
span's rows and take that calibrator. Each group's trees see ``(folds - 1) / folds`` of the rows
the deployed ones see, so their score scale is close to the deployed trees' (the time split's
first trees saw two thirds of them, an older two thirds).

Nodes are independent in the model (no feature names another node), so a group's rows carry no
information about another group's labels. Training and the chunked path (``models.chunked``)
use the same pieces.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import polars as pl
from sklearn.linear_model import LogisticRegression

from faultlens.models.evaluate import LEMON_COLUMN, Split, rule_score
from faultlens.models.feature_catalog import FEATURES
from faultlens.models.features import FeatureGrid, stack_features

log = logging.getLogger(__name__)
SCORE_CHUNK_ROWS = 500_000  # rows turned into one float array at a time when scoring


def span_window(split: Split) -> tuple[datetime, datetime]:
    """The fitting span: from the training window's start to the calibration window's end."""
    return split.train[0], split.calib[1]


def oof_window(split: Split, nodes: int, max_rows: int) -> tuple[datetime, datetime]:
    """The out-of-fold rows scored for the calibrator and the thresholds: the span's last part
    of at most ``max_rows`` node-hours, never shorter than the calibration window."""
    lo, hi = span_window(split)
    hours = max(int(max_rows / max(nodes, 1)), 1)
    return max(lo, min(split.calib[0], hi - timedelta(hours=hours))), hi


def span_rows(grid: FeatureGrid, split: Split) -> np.ndarray:
    """The labelable rows of the fitting span, as a ``grid.shape`` mask."""
    return window_rows(grid, span_window(split))


def window_rows(grid: FeatureGrid, window: tuple[datetime, datetime]) -> np.ndarray:
    """The labelable rows of ``window``, as a ``grid.shape`` mask."""
    lo, hi = window
    times = grid.row_times()
    inside = (times >= np.datetime64(lo, "us")) & (times <= np.datetime64(hi, "us"))
    return np.broadcast_to(inside & grid.labelable, grid.shape).copy()


def node_folds(nodes: Sequence[str], folds: int) -> dict[str, int]:
    """Each node's group: its position in the sorted list of ``nodes``, modulo ``folds``."""
    return {n: i % folds for i, n in enumerate(sorted(nodes))}


def row_folds(node: pl.Series, folds_of: dict[str, int]) -> np.ndarray:
    """The group of each row's node."""
    return node.cast(pl.String).replace_strict(folds_of, return_dtype=pl.Int32).to_numpy()


def fold_has_both_classes(y: np.ndarray, row_fold: np.ndarray, folds: int) -> bool:
    """Whether every group's training rows (the other groups') hold a failure and a non-failure."""
    for g in range(folds):
        rest = y[row_fold != g]
        if rest.size == 0 or rest.min() == rest.max():
            return False
    return True


def fit_folds(
    make: Callable[[], Any],
    X: np.ndarray,
    y: np.ndarray,
    w: np.ndarray,
    row_fold: np.ndarray,
    folds: int,
    client: Any = None,
    workers: int = 1,
) -> list[Any]:
    """One estimator per group, its trees fitted on the other groups' rows (no calibrator:
    ``make`` returns a ``FailurePredictor`` with ``calibration_fraction=0``). ``workers`` groups
    are fitted at once in threads (LightGBM releases the GIL; each fit keeps its own thread
    count and seed, so the trees are the same), each holding its copy of the other groups' rows;
    on Dask one at a time (the cluster spreads each fit)."""

    def fit(g: int) -> Any:
        rest = row_fold != g
        return make().fit(X[rest], y[rest], sample_weight=w[rest], dask_client=client)

    if workers <= 1 or client is not None:
        return [fit(g) for g in range(folds)]
    with ThreadPoolExecutor(max_workers=min(workers, folds)) as pool:
        return list(pool.map(fit, range(folds)))


def platt(margin: np.ndarray, labels: np.ndarray, limit: int, seed: int) -> LogisticRegression:
    """The Platt calibrator (as ``FailurePredictor.fit`` fits it) on out-of-fold margins, the
    negatives beyond ``limit`` rows sampled and weighted back (at least half of ``limit`` of
    them, however many failures there are: both classes are always there)."""
    y = labels.astype(bool)
    n_neg = int((~y).sum())
    keep = min(1.0, max(limit - int(y.sum()), limit // 2, 1) / max(n_neg, 1))
    pick = y | (np.random.default_rng(seed).random(y.size) < keep)
    weight = np.where(y[pick], 1.0, 1.0 / keep)
    return LogisticRegression(C=1e4).fit(margin[pick].reshape(-1, 1), y[pick], sample_weight=weight)


def compact(table: pl.DataFrame, margin: np.ndarray, node_type: Any = pl.String) -> pl.DataFrame:
    """A scored row without its features: node, ts, label, the raw ``margin`` (calibrated into
    ``score`` later, by ``calibrated``) and the two baselines' columns (``rule`` and the lemon
    count under its own name, which ``evaluate.baseline_thresholds`` reads)."""
    return pl.DataFrame(
        [
            table["node"].cast(node_type),
            table["ts"],
            table["label"].cast(pl.Int8),
            pl.Series("margin", margin, dtype=pl.Float64),
            pl.Series("rule", rule_score(table), dtype=pl.Float32),
            table[LEMON_COLUMN].cast(pl.Float32),
        ]
    )


def calibrated(rows: pl.DataFrame, calibrator: LogisticRegression | None) -> pl.DataFrame:
    """``rows`` (``compact``'s) with ``score``: the calibrated probability of their margin (the
    logistic of it without a calibrator, as ``FailurePredictor.predict_proba`` does)."""
    margin = rows["margin"].to_numpy()
    if not len(margin):
        proba = np.zeros(0)
    elif calibrator is None:
        proba = 1.0 / (1.0 + np.exp(-margin))
    else:
        proba = calibrator.predict_proba(margin.reshape(-1, 1))[:, 1]
    return rows.with_columns(pl.Series("score", proba, dtype=pl.Float64))


def margins(model: Any, table: pl.DataFrame) -> np.ndarray:
    """Raw scores of ``model``'s trees for the rows of ``table``, ``SCORE_CHUNK_ROWS`` at a time."""
    if table.height == 0:
        return np.zeros(0)
    return np.concatenate(
        [
            model.decision_function(table[i : i + SCORE_CHUNK_ROWS].select(FEATURES).to_numpy())
            for i in range(0, table.height, SCORE_CHUNK_ROWS)
        ]
    )


@dataclass
class CrossFitted:
    """What cross-fitting gives the trainer."""

    deployed: Any  # trees fitted on the span's rows, with the out-of-fold calibrator
    oof: pl.DataFrame  # compact rows of ``window`` with their out-of-fold ``score``
    fit_rows: tuple[int, int]  # rows (and failures among them) the deployed trees were fitted on
    window: tuple[datetime, datetime]  # where the calibrator and the thresholds were fitted


def usable(nodes: Sequence[str], y: np.ndarray, row_fold: np.ndarray, folds: int) -> bool:
    """Whether cross-fitting can run: at least two groups of nodes, and every group's training
    rows (the other groups') hold both classes. Otherwise the trainer keeps the time split."""
    if folds < 2 or len(nodes) < folds:
        return False
    return fold_has_both_classes(y, row_fold, folds)


def cross_fit_grid(
    grid: FeatureGrid,
    split: Split,
    cfg: Any,
    keep: float,
    make: Callable[[], Any],
    client: Any = None,
) -> CrossFitted | None:
    """Cross-fitting on one grid (the unchunked trainer; see the module doc). The span's rows are
    sampled like the training window's (every failure, negatives at ``keep``, weighted back);
    each group's rows of ``oof_window`` are built and scored one group at a time, so the largest
    table is a ``1 / folds`` share of the span's. None when ``usable`` says no."""
    folds = int(cfg.cross_fit_folds)
    rows = span_rows(grid, split)
    rng = np.random.default_rng(cfg.seed)
    fit = grid.table(
        {"fit": rows & (grid.labels | (rng.random(grid.shape, dtype=np.float32) < keep))}
    )
    fit = fit["fit"]
    folds_of = node_folds(grid.nodes, max(folds, 1))
    row_fold = row_folds(fit["node"], folds_of)
    y = fit["label"].to_numpy()
    if not usable(grid.nodes, y, row_fold, folds):
        log.info(
            "cross-fitting not possible (%d nodes, %d failures): time split",
            len(grid.nodes),
            int(y.sum()),
        )
        return None
    w = np.where(y > 0, 1.0, 1.0 / keep)
    X = stack_features([fit])
    del fit
    models = fit_folds(make, X, y, w, row_fold, folds, client, workers=cfg.fold_workers)
    deployed = make().fit(X, y, sample_weight=w, dask_client=client)
    del X
    window = oof_window(split, len(grid.nodes), cfg.max_oof_rows)
    scored = window_rows(grid, window)
    node_fold = np.array([folds_of[n] for n in grid.nodes])
    parts = []
    for g, model in enumerate(models):
        table = grid.table({"oof": scored & (node_fold == g)[:, None]})["oof"]
        parts.append(compact(table, margins(model, table)))
        del table
    oof = pl.concat(parts)
    cal = platt(oof["margin"].to_numpy(), oof["label"].to_numpy(), cfg.max_calib_rows, cfg.seed)
    deployed.calibrator_ = cal
    return CrossFitted(deployed, calibrated(oof, cal), (len(y), int(y.sum())), window)

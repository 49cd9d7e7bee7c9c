"""Memory plan of a training run: how much the feature tables will take, checked before building.

Training materializes, per window, a node x hour table of ``FEATURES`` as float32 (the calibration
and test windows in full, the training window sampled down to ``max_train_rows``), beside dense
node x hour arrays per base column while the windowed sums are built. The estimate is

    peak ~ BASE_GB + 2.2 x window_rows x (features + 4) x 4 B + 4 x node_hours x 8 B

where ``window_rows`` is the larger of the calibration and test windows (with cross-fitting,
also one fold's out-of-fold rows of the fitting span, which are built a fold at a time); it is
fitted on ``bench.bench_models`` (12,500 nodes x 42 days: 4.85 GB estimated, 4.89 GB measured).

Over the limit, training runs in node groups (``models.chunked``): one group's grid and tables
at a time, beside the sampled training and calibrator rows and the compact scored rows of the
calibration and test windows (``COMPACT_ROW_B`` each):

    peak ~ BASE_GB + sampled_rows x (features + 4) x 4 B x 2.2
           + node_hours x (calib + test share) x COMPACT_ROW_B + group x hours x per_node_hour

(with cross-fitting, the scored out-of-fold rows of the span, at most ``max_oof_rows``, in place
of the calibration window's share).

``check_chunked_plan`` picks the largest group that fits; when not even one node does, it stops
with a message naming the ``--since`` that fits, instead of being killed by the kernel half-way.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from faultlens.ingest.errors import ConfigError
from faultlens.models.feature_catalog import FEATURES

BASE_GB = 0.6  # interpreter, LightGBM, DuckDB buffers
# a scored row of the chunked path (37 B: node, ts, label, margin, score, the baselines' two
# columns) and its copies while the windows are concatenated
COMPACT_ROW_B = 60
GB = 1024**3


@dataclass(frozen=True)
class MemoryPlan:
    nodes: int
    hours: int
    estimate_gb: float
    limit_gb: float

    @property
    def fits(self) -> bool:
        return self.estimate_gb <= self.limit_gb


def window_share(test_fraction: float, calib_fraction: float, folds: int = 0) -> float:
    """The largest feature table's share of the node-hours: the test or calibration window, or,
    with cross-fitting (``models.crossfit``), one fold's out-of-fold rows of the fitting span."""
    share = max(test_fraction, calib_fraction)
    if folds >= 2:
        share = max(share, (1.0 - test_fraction) / folds)
    return share


def _per_node_hour(window_share: float) -> float:
    return 2.2 * window_share * (len(FEATURES) + 4) * 4 + 4 * 8


def estimate_gb(nodes: int, hours: int, window_share: float) -> float:
    return BASE_GB + nodes * hours * _per_node_hour(window_share) / GB


def plan_training(
    nodes: int,
    start: datetime,
    end: datetime,
    *,
    test_fraction: float,
    calib_fraction: float,
    limit_gb: float,
    folds: int = 0,
) -> MemoryPlan:
    hours = max(1, int((end - start) / timedelta(hours=1)) + 1)
    share = window_share(test_fraction, calib_fraction, folds)
    return MemoryPlan(nodes, hours, round(estimate_gb(nodes, hours, share), 2), limit_gb)


def check_plan(
    plan: MemoryPlan,
    end: datetime,
    *,
    test_fraction: float,
    calib_fraction: float,
    folds: int = 0,
) -> None:
    """Raise ``ConfigError`` with the ``--since`` that fits when the plan is over its limit."""
    if plan.fits:
        return
    share = window_share(test_fraction, calib_fraction, folds)
    room = max(plan.limit_gb - BASE_GB, 0.0) * GB
    fit_h = int(room / (max(plan.nodes, 1) * _per_node_hour(share)))
    # the next midnight after the earliest start that fits (a whole date for the command line)
    earliest = end - timedelta(hours=fit_h)
    since = (datetime.combine(earliest.date(), datetime.min.time()) + timedelta(days=1)).strftime(
        "%Y-%m-%d"
    )
    raise ConfigError(
        f"training on {plan.nodes:,} nodes x {plan.hours / 24:,.0f} days needs about "
        f"{plan.estimate_gb:,.1f} GB, over the {plan.limit_gb:g} GB limit: train on the last "
        f"{fit_h / 24:,.0f} days (--since {since}) or raise --max-memory-gb"
    )


def _since_for(end: datetime, fit_h: int) -> str:
    """The next midnight after ``end - fit_h`` (a whole date for the command line)."""
    earliest = end - timedelta(hours=fit_h)
    return (datetime.combine(earliest.date(), datetime.min.time()) + timedelta(days=1)).strftime(
        "%Y-%m-%d"
    )


def check_chunked_plan(
    plan: MemoryPlan,
    end: datetime,
    *,
    test_fraction: float,
    calib_fraction: float,
    max_train_rows: int,
    max_calib_rows: int,
    folds: int = 0,
    max_oof_rows: int = 0,
) -> int:
    """The largest node group whose chunked run fits ``plan.limit_gb`` (see the module doc);
    ``ConfigError`` with the ``--since`` that fits when not even a group of one node does.
    With cross-fitting the scored rows of the fitting span replace the calibration window's:
    at most ``max_oof_rows``, never fewer than the calibration window's."""
    share = window_share(test_fraction, calib_fraction, folds)
    sampled_gb = 2.2 * (max_train_rows + max_calib_rows) * (len(FEATURES) + 4) * 4 / GB
    scored = calib_fraction
    if folds >= 2:
        node_hours = max(plan.nodes * plan.hours, 1)
        scored = max(calib_fraction, min(1.0 - test_fraction, max_oof_rows / node_hours))
    per_hour_compact = plan.nodes * (test_fraction + scored) * COMPACT_ROW_B
    fixed_gb = BASE_GB + sampled_gb + plan.hours * per_hour_compact / GB
    per_node_gb = plan.hours * _per_node_hour(share) / GB
    group = int((plan.limit_gb - fixed_gb) / per_node_gb) if per_node_gb > 0 else plan.nodes
    if group >= 1:
        return min(group, max(plan.nodes, 1))
    room = max(plan.limit_gb - BASE_GB - sampled_gb, 0.0) * GB
    fit_h = int(room / (per_hour_compact + _per_node_hour(share)))
    raise ConfigError(
        f"training on {plan.nodes:,} nodes x {plan.hours / 24:,.0f} days is over the "
        f"{plan.limit_gb:g} GB limit even one node at a time (the scored calibration and test "
        f"rows alone take {plan.hours * per_hour_compact / GB:,.1f} GB): train on the last "
        f"{fit_h / 24:,.0f} days (--since {_since_for(end, fit_h)}) or raise --max-memory-gb"
    )

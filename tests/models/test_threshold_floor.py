"""The operating threshold's floor: lowered where the out-of-fold scores saw few failures coming."""

from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl
import pytest

from faultlens.models.evaluate import seen_share
from faultlens.models.predictor import TrainConfig, operating_floor, operating_threshold

D = datetime(2025, 3, 1)
H = timedelta(hours=1)


def _rows(scores: dict[str, list[float]]) -> pl.DataFrame:
    """Hourly rows from D on, one list of scores per node."""
    return pl.DataFrame(
        [
            {"node": node, "ts": D + i * H, "score": s}
            for node, series in scores.items()
            for i, s in enumerate(series)
        ]
    )


def test_seen_share_counts_failures_whose_node_scored_high_in_the_horizon_before() -> None:
    quiet = [0.01] * 48
    rows = _rows(
        {
            "a": [0.01] * 30 + [0.4] + [0.01] * 17,  # high at hour 30: 10 h before its failure
            "b": [0.5] * 5 + [0.01] * 43,  # high at hours 0-4: 35 h before, out of the horizon
            "c": [0.01] * 39 + [0.9] * 9,  # high only after its failure (hour 39)
            "d": quiet,  # never high
            "e": [0.01] * 23
            + [0.2]
            + [0.01] * 24,  # high at hour 23, 24 h before: in (ts >= f - h)
        }
    )
    failures = pl.DataFrame(
        {
            "node": ["a", "b", "c", "d", "e", "a"],
            "ts": [D + 40 * H, D + 40 * H, D + 39 * H, D + 40 * H, D + 47 * H, D + 60 * H],
        }
    )
    window = (D + 24 * H, D + 48 * H)  # the last failure of a (hour 60) is outside
    share, n = seen_share(rows, failures, horizon_h=24, window=window, level=0.1)
    assert n == 5
    assert share == pytest.approx(2 / 5)  # a and e
    # a level above every high score: nothing seen; a window without failures: no share
    assert seen_share(rows, failures, horizon_h=24, window=window, level=0.95) == (0.0, 5)
    empty = (D + 100 * H, D + 120 * H)
    assert seen_share(rows, failures, horizon_h=24, window=empty, level=0.1) == (None, 0)


def test_floor_goes_from_the_low_share_floor_to_min_threshold() -> None:
    cfg = TrainConfig(min_threshold=0.35, low_share_floor=0.25, floor_shares=(0.3, 0.5))
    assert operating_floor(cfg, 0.1, 100) == pytest.approx(0.25)
    assert operating_floor(cfg, 0.3, 100) == pytest.approx(0.25)
    assert operating_floor(cfg, 0.4, 100) == pytest.approx(0.30)
    assert operating_floor(cfg, 0.5, 100) == pytest.approx(0.35)
    assert operating_floor(cfg, 0.9, 100) == pytest.approx(0.35)
    # too few failures to measure the share, or no failure at all: the fixed floor
    assert operating_floor(cfg, 0.1, cfg.min_seen_episodes - 1) == pytest.approx(0.35)
    assert operating_floor(cfg, None, 0) == pytest.approx(0.35)
    # switched off
    off = TrainConfig(min_threshold=0.35, low_share_floor=None)
    assert operating_floor(off, 0.1, 100) == pytest.approx(0.35)
    # a low-share floor above min_threshold never raises it
    assert operating_floor(TrainConfig(min_threshold=0.2, low_share_floor=0.3), 0.1, 100) == 0.2


def test_the_operating_threshold_uses_the_given_floor() -> None:
    cfg = TrainConfig(min_threshold=0.35, max_threshold=0.6)
    assert operating_threshold(cfg, 0.1, 0.25) == 0.25  # the pick below the lowered floor
    assert operating_threshold(cfg, 0.3, 0.25) == 0.3  # the pick between the two floors
    assert operating_threshold(cfg, 0.3) == 0.35  # no floor given: min_threshold
    assert operating_threshold(cfg, 0.9, 0.25) == 0.6  # the cap still applies


def test_the_threshold_and_why_its_floor_in_words() -> None:
    from faultlens.reports.q_detail import threshold_note

    doc = {
        "horizon_h": 24.0,
        "thresholds": {"drain_after_jobs": 0.25},
        "calibration": {
            "floor": {"floor": 0.25, "seen_share": 0.28, "seen_level": 0.1, "failure_episodes": 96}
        },
    }
    assert threshold_note(doc) == (
        "operating threshold 0.250: floor 0.250, the out-of-fold scores saw 28% of the 96 "
        "failures of the fitting window coming (above 0.1 in the 24 h before)"
    )
    doc["calibration"]["floor"].update(failure_episodes=9, min_episodes=20, floor=0.35)
    doc["thresholds"]["drain_after_jobs"] = 0.35
    assert threshold_note(doc) == (
        "operating threshold 0.350: floor 0.350, the out-of-fold scores saw 28% of the 9 "
        "failures of the fitting window coming (above 0.1 in the 24 h before); fewer than 20, "
        "too few to lower the floor"
    )
    doc["calibration"]["floor"].update(seen_share=None, failure_episodes=0, floor=0.35)
    doc["thresholds"]["drain_after_jobs"] = float("inf")
    assert threshold_note(doc) == (
        "no operating threshold: floor 0.350, no failures in the fitting window"
    )
    assert threshold_note({"horizon_h": 24.0, "thresholds": {}, "calibration": {}}) is None

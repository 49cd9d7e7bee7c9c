"""Alerts held open until the score drops below the clear level (hysteresis), in the evaluation's
alert episodes, in the threshold pick, and in ``predict`` across runs."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import polars as pl
import pytest

from faultlens.ingest.catalog import load_catalog
from faultlens.ingest.store import Store
from faultlens.models.actions import RiskAction, Thresholds
from faultlens.models.evaluate import alert_episodes, choose_threshold, episode_metrics
from faultlens.models.predictor import hold_open
from tests.models.synthetic import insert_events

D = datetime(2025, 1, 1)
H = timedelta(hours=1)


def _hourly(node: str, scores: dict[int, float], hours: int = 30) -> list[tuple]:
    return [(node, D + h * H, scores.get(h, 0.0)) for h in range(hours)]


# Threshold 0.5, clear 0.3: hours 2-4 stay at or above 0.3 after opening at 2; hour 6 (0.4) is
# above the clear level but comes before the run's first hour at the threshold (7); hour 10 alone.
WAVER = {2: 0.9, 3: 0.4, 4: 0.3, 5: 0.1, 6: 0.4, 7: 0.8, 8: 0.45, 10: 0.9}
ROWS = pl.DataFrame(_hourly("n1", WAVER), schema=["node", "ts", "score"], orient="row")
NO_FAIL = pl.DataFrame(schema={"node": pl.String, "ts": pl.Datetime("us")})


def _spans(a: pl.DataFrame) -> list[tuple[int, int]]:
    return [(r["start"].hour, r["end"].hour) for r in a.sort("start").iter_rows(named=True)]


def test_an_open_alert_stays_open_down_to_the_clear_level() -> None:
    assert _spans(alert_episodes(ROWS, 0.5, NO_FAIL, clear=0.3)) == [(2, 5), (7, 9), (10, 11)]
    # no clear level (or one at the threshold): open exactly while at or above the threshold
    without = [(2, 3), (7, 8), (10, 11)]
    assert _spans(alert_episodes(ROWS, 0.5, NO_FAIL)) == without
    assert _spans(alert_episodes(ROWS, 0.5, NO_FAIL, clear=0.5)) == without
    assert _spans(alert_episodes(ROWS, 0.5, NO_FAIL, clear=0.9)) == without  # never above it


def test_a_failure_closes_a_held_alert() -> None:
    fail = pl.DataFrame({"node": ["n1"], "ts": [D + 3.5 * H]})
    # hour 4 (0.3) comes after the failure and never reaches the threshold: no new alert
    assert _spans(alert_episodes(ROWS, 0.5, fail, clear=0.3)) == [(2, 4), (7, 9), (10, 11)]


def test_held_alerts_count_once_in_precision() -> None:
    # The score dips below the threshold for an hour and the node fails at 25:00: both alerts
    # of the unheld episodes match it (reach 26:00 and 28:00), a second page for one failure.
    rows = pl.DataFrame(
        _hourly("n1", {0: 0.7, 1: 0.7, 2: 0.4, 3: 0.7}, hours=40),
        schema=["node", "ts", "score"],
        orient="row",
    )
    fail = pl.DataFrame({"node": ["n1"], "ts": [D + 25 * H]})
    window = (D, D + 39 * H)
    one = episode_metrics(rows, fail, threshold=0.6, horizon_h=24, window=window, clear=0.3)
    two = episode_metrics(rows, fail, threshold=0.6, horizon_h=24, window=window)
    assert (one["alerts"], one["true_alerts"], one["caught"]) == (1, 1, 1)
    assert (two["alerts"], two["true_alerts"], two["caught"]) == (2, 2, 1)


def test_the_threshold_pick_uses_the_held_alerts() -> None:
    # 12 nodes score 0.7 at 00-01, dip to 0.4 at 02, 0.7 again at 03-04 and fail at 27:00: the
    # first of their two alerts (closed at 02:00, reach 26:00) is false without the hold. 12
    # nodes score 0.95 at 00-01 and fail at 10:00.
    rows, fails = [], []
    for i in range(12):
        rows += _hourly(f"w{i:02d}", {0: 0.7, 1: 0.7, 2: 0.4, 3: 0.7, 4: 0.7}, hours=48)
        fails.append((f"w{i:02d}", D + 27 * H))
        rows += _hourly(f"s{i:02d}", {0: 0.95, 1: 0.95}, hours=48)
        fails.append((f"s{i:02d}", D + 10 * H))
    frame = pl.DataFrame(rows, schema=["node", "ts", "score"], orient="row")
    failures = pl.DataFrame(fails, schema=["node", "ts"], orient="row")
    pick = {
        "horizon_h": 24,
        "window": (D, D + 47 * H),
        "candidates": np.array([0.6, 0.9]),
        "target_precision": 0.9,
    }
    assert choose_threshold(frame, failures, **pick) == 0.9  # 0.6: 24 / 36 alerts true
    assert choose_threshold(frame, failures, clear_fraction=0.5, **pick) == 0.6  # 24 / 24


def test_thresholds_json_keeps_the_clear_level_and_reads_old_cards() -> None:
    th = Thresholds(watch=0.2, drain_after_jobs=0.4, drain_now=0.9, clear=0.2)
    assert Thresholds.from_json(th.to_json()) == th and th.hold == 0.2
    old = Thresholds.from_json({"watch": 0.2, "drain_after_jobs": 0.4, "drain_now": 0.9})
    assert old.clear is None and old.hold == 0.4  # a model trained before: no hold


T = datetime(2025, 3, 1, 12)
CARD = {"model_version": "m1", "horizon_h": 24.0}
TH = Thresholds(watch=0.2, drain_after_jobs=0.4, drain_now=0.9, clear=0.2)


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "x.duckdb") as s:
        s.load_xid_catalog(load_catalog(None))
        yield s


def _run(store: Store, at: datetime, actions: dict[str, str], version: str = "m1") -> None:
    store.insert(
        "predictions",
        pl.DataFrame(
            {
                "run_id": f"run-{at:%H%M}-{version}",
                "made_at": at,
                "node": list(actions),
                "gpu": None,
                "target": "failure",
                "horizon": 24.0,
                "score": 0.5,
                "action": list(actions.values()),
                "model_version": version,
            }
        ),
    )


def _scored(scores: dict[str, float]) -> pl.DataFrame:
    action = [
        RiskAction.DRAIN_AFTER_JOBS if s >= 0.4 else RiskAction.WATCH if s >= 0.2 else "none"
        for s in scores.values()
    ]
    nodes = list(scores)
    return pl.DataFrame(
        {
            "node": nodes + nodes,  # each node's row and one GPU row
            "gpu": [None] * len(nodes) + ["0"] * len(nodes),
            "score": list(scores.values()) * 2,
            "action": [str(a) for a in action] * 2,
        },
        schema={"node": pl.String, "gpu": pl.String, "score": pl.Float64, "action": pl.String},
    )


def _actions(frame: pl.DataFrame) -> dict[str, str]:
    return dict(frame.filter(pl.col("gpu").is_null()).select("node", "action").iter_rows())


def test_predict_holds_the_run_befores_drains_above_the_clear_level(store) -> None:
    _run(store, T - 2 * H, {"a": "none", "b": "none"})  # an older run: not the one before
    _run(store, T - H, {"a": "drain_after_jobs", "b": "drain_now", "c": "watch", "d": "none"})
    _run(store, T - H / 2, {"a": "drain_after_jobs"}, version="m0")  # another model's run
    got = _actions(
        hold_open(store, _scored({"a": 0.3, "b": 0.1, "c": 0.3, "e": 0.3}), TH, CARD, as_of=T)
    )
    # a: drained, still above the clear level: held; b: below it: closed; c, e: never drained
    assert got == {"a": "drain_after_jobs", "b": "none", "c": "watch", "e": "watch"}


def test_predict_does_not_hold_after_a_failure_or_a_stale_run(store) -> None:
    _run(store, T - H, {"a": "drain_after_jobs", "b": "drain_after_jobs"})
    insert_events(
        store,
        [
            {
                "ts": T - H / 4,
                "node": "b",
                "source": "kernel",
                "kind": "xid",
                "code": 79,
                "severity": "critical",
                "file": "/logs/b.log",
                "line": 1,
            }
        ],
    )
    got = _actions(hold_open(store, _scored({"a": 0.3, "b": 0.3}), TH, CARD, as_of=T))
    assert got == {"a": "drain_after_jobs", "b": "watch"}  # b fell off the bus since
    # the run before was more than a horizon ago: it says nothing of the hours between
    late = T + 25 * H
    assert _actions(hold_open(store, _scored({"a": 0.3}), TH, CARD, as_of=late)) == {"a": "watch"}
    # a model without a clear level holds nothing
    plain = Thresholds(watch=0.2, drain_after_jobs=0.4, drain_now=0.9)
    assert _actions(hold_open(store, _scored({"a": 0.3}), plain, CARD, as_of=T)) == {"a": "watch"}

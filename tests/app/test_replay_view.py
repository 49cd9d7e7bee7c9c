"""The demo's replay line about the failure predictor: priced when prediction runs came before
the interruptions, said to be unpriced (not "worth 0") when none did."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import polars as pl

from faultlens.app.replay_view import _no_alert_before
from faultlens.ingest.store import Store
from faultlens.replay.model import Trace

START = datetime(2025, 1, 1)


def _trace(hours: list[float], predicted: list[bool]) -> Trace:
    n = len(hours)
    return Trace(
        t_h=np.array(hours),
        node=np.zeros(n, np.int64),
        hardware=np.ones(n, bool),
        warned=np.zeros(n, bool),
        predicted=np.array(predicted),
        span_h=100.0,
        fleet_nodes=4,
        start=START,
    )


def _prediction(store: Store, at: datetime) -> None:
    store.insert(
        "predictions",
        pl.DataFrame(
            {
                "run_id": ["r"],
                "made_at": [at],
                "node": ["n1"],
                "target": ["failure"],
                "horizon": [24.0],
                "score": [0.9],
            }
        ),
    )


def test_predictions_only_after_the_interruptions_are_said_to_price_nothing() -> None:
    with Store() as store:
        _prediction(store, START + timedelta(hours=99))  # the demo's one run, at the data's end
        text = _no_alert_before(store, _trace([10.0, 40.0], [False, False]))
    assert text is not None
    assert "not priced" in text and "2 interruptions" in text
    assert "2025-01-05 03:00" in text  # when the first prediction run was


def test_no_prediction_at_all_is_said_too() -> None:
    with Store() as store:
        text = _no_alert_before(store, _trace([10.0], [False]))
    assert text is not None and "none recorded" in text


def test_predictions_in_time_that_caught_nothing_are_a_real_zero() -> None:
    with Store() as store:
        _prediction(store, START + timedelta(hours=5))  # before the second interruption
        assert _no_alert_before(store, _trace([10.0, 40.0], [False, False])) is None


def test_a_predicted_interruption_is_priced() -> None:
    with Store() as store:
        assert _no_alert_before(store, _trace([10.0], [True])) is None

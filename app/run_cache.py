"""A scheduled run with nothing new reuses the last run's prediction instead of scoring again.

The prediction of a run depends on the database's prediction inputs, ``as_of``, the model and a
few settings. The run saves its alerts in ``run_cache`` with ``ingest.watermarks.data_mark`` of
the inputs it read (its scores are in ``predictions`` under its ``run_id``); the next run with the
same digest, ``as_of``, model version and settings reads them back: no feature query, no LightGBM
import, no scoring. Anything written to the inputs since (an ingest, a refresh, a reparse) changes
the digest and the run scores again.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import polars as pl

from faultlens.ingest.store import Store

log = logging.getLogger(__name__)


@dataclass
class RunPrediction:
    """What a run needs of a prediction, computed now or reused (``reused``)."""

    run_id: str
    as_of: datetime
    model_version: str
    rows: pl.DataFrame  # node, gpu (null on node rows), score, action
    alerts: list[dict[str, Any]]
    reused: bool = False


def settings_key(scheduler: str, dashboard_url: str | None) -> str:
    """The settings a prediction depends on besides its inputs, as a JSON key."""
    try:
        code = version("faultlens")
    except PackageNotFoundError:  # a source tree run without an install
        code = "unknown"
    return json.dumps(
        {"scheduler": scheduler, "dashboard_url": dashboard_url, "faultlens": code},
        sort_keys=True,
    )


def load(
    store: Store, *, mark: str, as_of: datetime, model_version: str, settings: str
) -> RunPrediction | None:
    """The saved prediction for exactly these inputs and settings, or None."""
    found = store.records(
        "SELECT run_id, n_rows, alerts FROM run_cache WHERE data_mark = ? AND as_of = ? "
        "AND model_version = ? AND settings = ?",
        [mark, as_of, model_version, settings],
    )
    if not found:
        return None
    run_id, n_rows = found[0]["run_id"], int(found[0]["n_rows"])
    rows = store.query(
        "SELECT node, gpu, score, action FROM predictions WHERE run_id = ? "
        "ORDER BY node, gpu NULLS FIRST",
        [run_id],
    )
    if rows.height != n_rows:  # the run's rows were deleted or replaced since
        log.info("run cache: %s has %d of its %d rows, scoring again", run_id, rows.height, n_rows)
        return None
    log.info("run cache: nothing new since %s, its prediction reused", run_id)
    return RunPrediction(
        run_id, as_of, model_version, rows, json.loads(found[0]["alerts"]), reused=True
    )


def save(store: Store, pred: RunPrediction, *, mark: str, settings: str, now: datetime) -> None:
    """Keep ``pred`` (whose rows are already in ``predictions``) as the one reusable run."""
    with store.transaction():
        store.execute("DELETE FROM run_cache")
        store.execute(
            "INSERT INTO run_cache VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [
                pred.run_id,
                pred.as_of,
                pred.model_version,
                settings,
                mark,
                pred.rows.height,
                json.dumps(pred.alerts, default=str),
                now,
            ],
        )

"""Prediction from failure records alone (models/survival.py): features that read only the past,
labels that read only the horizon, and on the two real data sets, a model that beats the lemon
count and an age-only model on a held-out time split."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import polars as pl
import pytest
from typer.testing import CliRunner

from faultlens.app.cli import app
from faultlens.models.survival import HOURS_SINCE_CAP, History, _label, snapshots
from tests.conftest import SHARED

D = datetime(2020, 1, 1)
DAY = timedelta(days=1)
# Two GPUs in one Cray cabinet: g1 (batch old) fails on days 10 and 40 in slot A, g2 (new)
# never; g3 sits in g1's slot from day 50.
SLOT_A, SLOT_B = "c1-2c0s3n1", "c1-2c2s5n0"
UNITS = pl.DataFrame(
    {
        "unit": ["g1", "g2", "g3"],
        "node": [SLOT_A, SLOT_B, SLOT_A],
        "rack": ["c1-2", "c1-2", "c1-2"],
        "batch": ["old", "new", "new"],
        "start": [D, D + 5 * DAY, D + 50 * DAY],
        "end": [D + 45 * DAY, D + 100 * DAY, D + 100 * DAY],
    }
).with_columns(pl.col("start", "end").cast(pl.Datetime("us")))
FAILS = pl.DataFrame(
    {
        "unit": ["g1", "g1"],
        "node": [SLOT_A, SLOT_A],
        "ts": [D + 10 * DAY, D + 40 * DAY],
        "rack": ["c1-2", "c1-2"],
    }
).with_columns(pl.col("ts").cast(pl.Datetime("us")))
HIST = History("t", "gpu", UNITS, FAILS)
TIMES = [D + 10 * DAY, D + 20 * DAY, D + 41 * DAY, D + 60 * DAY]


def _row(frame: pl.DataFrame, unit: str, t: datetime) -> dict:
    (row,) = frame.filter((pl.col("unit") == unit) & (pl.col("t") == t)).to_dicts()
    return row


def test_features_read_only_records_before_the_snapshot() -> None:
    rows = snapshots(HIST, TIMES)
    # at risk: g1 until day 45, g2 from day 5, g3 from day 50
    at = {(r["unit"], r["t"]) for r in rows.select("unit", "t").to_dicts()}
    assert at == {
        *(("g1", t) for t in TIMES[:3]),
        *(("g2", t) for t in TIMES),
        ("g3", TIMES[3]),
    }
    day10 = _row(rows, "g1", TIMES[0])  # the failure at exactly t is not yet known at t
    assert day10["fails_total"] == 0 and day10["hours_since_fail"] == HOURS_SINCE_CAP
    day20 = _row(rows, "g1", TIMES[1])
    assert day20["fails_total"] == 1 and day20["fails_30d"] == 1
    assert day20["hours_since_fail"] == 10 * 24 and day20["age_h"] == 20 * 24
    day41 = _row(rows, "g1", TIMES[2])  # day 10 is 31 days back, day 40 one
    assert (day41["fails_total"], day41["fails_30d"], day41["fails_365d"]) == (2, 1, 2)
    assert day41["hours_since_fail"] == 24
    # g3 inherits nothing of its own, but its slot's and rack's history is g1's two failures
    g3 = _row(rows, "g3", TIMES[3])
    assert g3["fails_total"] == 0 and g3["node_fails_total"] == 2 and g3["rack_fails_total"] == 2
    assert (g3["loc_col"], g3["loc_row"], g3["loc_cage"], g3["loc_slot"], g3["loc_node"]) == (
        1,
        2,
        0,
        3,
        1,
    )
    g2 = _row(rows, "g2", TIMES[3])  # other slot, same rack
    assert g2["node_fails_total"] == 0 and g2["rack_fails_total"] == 2
    assert g2["loc_cage"] == 2 and g2["batch_code"] == 0 and day20["batch_code"] == 1


def test_label_is_a_failure_within_the_horizon_from_the_snapshot_on() -> None:
    rows = snapshots(HIST, TIMES).sort("unit", "t")
    labels = dict(
        zip(
            zip(rows["unit"], rows["t"], strict=True),
            _label(rows, 30 * 24).tolist(),
            strict=True,
        )
    )
    assert labels[("g1", TIMES[0])] == 1  # the failure at t itself is in [t, t + 30 d)
    assert labels[("g1", TIMES[1])] == 1  # day 40 is 20 days ahead
    assert labels[("g1", TIMES[2])] == 0  # no failure after day 40
    assert labels[("g2", TIMES[0])] == 0 and labels[("g3", TIMES[3])] == 0
    assert _label(rows.filter(pl.col("t") == TIMES[1]), 10 * 24).sum() == 0  # 20 d > 10 d


# -- the real data sets, through the CLI ----------------------------------------------------------

REAL = SHARED / "realdata"
LANL = REAL / "lanl-failures-1996-2005" / "LA-UR-05-7318-failure-data-1996-2005.csv"
TITAN = REAL / "titan-gpu-lifetimes"
runner = CliRunner()


def _cli(*args: str) -> dict:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _beats_both(doc: dict) -> None:
    m = doc["metrics"]
    assert doc["positives"]["test"] >= 100  # enough test failures for PR-AUC to mean something
    assert m["model"]["pr_auc"] > m["lemon_baseline"]["pr_auc"]
    assert m["model"]["pr_auc"] > m["age_baseline"]["pr_auc"]
    assert m["model"]["pr_auc"] > 2 * doc["prevalence_test"]  # better than ranking at random
    assert m["model"]["concordance"] > 0.5


@pytest.mark.slow
@pytest.mark.parametrize("horizon_h", [24.0, 168.0])
def test_lanl_nodes_next_day_and_week_beat_lemon_and_age(tmp_path, horizon_h) -> None:
    db = str(tmp_path / "lanl.duckdb")
    _cli("ingest", str(LANL), "--dataset", "lanl", "--db", db, "--json")
    doc = _cli("train", "--dataset", "lanl", "--horizon-h", str(horizon_h), "--db", db, "--json")
    assert doc["unit"] == "node" and doc["split_at"] > doc["window"][0]
    _beats_both(doc)


@pytest.mark.slow
def test_titan_gpus_next_30_days_beat_lemon_and_age(tmp_path) -> None:
    db = str(tmp_path / "titan.duckdb")
    files = [str(TITAN / "gc_full.csv"), str(TITAN / "gc_summary_loc.csv")]
    _cli("ingest", *files, "--dataset", "titan", "--db", db, "--json")
    doc = _cli("train", "--dataset", "titan", "--horizon-h", "720", "--db", db, "--json")
    assert doc["unit"] == "gpu"
    _beats_both(doc)

"""Bounded memory of training: the plan, the over-limit message, and --since."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest
from typer.testing import CliRunner

from faultlens.ingest.errors import ConfigError
from faultlens.ingest.store import Store
from faultlens.models.feature_catalog import FEATURES
from faultlens.models.plan import (
    BASE_GB,
    COMPACT_ROW_B,
    GB,
    check_chunked_plan,
    check_plan,
    plan_training,
)
from tests.models.synthetic import random_cluster

END = datetime(2035, 1, 1)
FR = {"test_fraction": 0.25, "calib_fraction": 0.25}


def test_plan_grows_with_nodes_and_hours() -> None:
    start = END - timedelta(days=3650)
    plan = plan_training(1524, start, END, limit_gb=8.0, **FR)
    per_row = 2.2 * 0.25 * (len(FEATURES) + 4) * 4 + 32  # the documented formula
    assert plan.hours == 3650 * 24 + 1
    assert plan.estimate_gb == pytest.approx(BASE_GB + 1524 * plan.hours * per_row / GB, abs=0.01)
    assert not plan.fits
    half = plan_training(762, start, END, limit_gb=8.0, **FR)
    assert half.estimate_gb - BASE_GB == pytest.approx((plan.estimate_gb - BASE_GB) / 2, rel=1e-3)


def test_over_limit_names_a_since_that_fits() -> None:
    start = END - timedelta(days=3650)
    plan = plan_training(1524, start, END, limit_gb=8.0, **FR)
    with pytest.raises(ConfigError, match=r"--since (\d{4}-\d\d-\d\d)") as err:
        check_plan(plan, END, **FR)
    since = datetime.strptime(err.value.args[0].split("--since ")[1][:10], "%Y-%m-%d")
    assert start < since < END
    assert plan_training(1524, since, END, limit_gb=8.0, **FR).fits
    check_plan(plan_training(100, END - timedelta(days=30), END, limit_gb=8.0, **FR), END, **FR)


def test_train_cli_stops_over_the_limit_and_trains_since(tmp_path) -> None:
    from faultlens.app.cli import app
    from faultlens.app.common import ExitCode

    db = tmp_path / "f.duckdb"
    with Store(db) as store:
        truth = random_cluster(store, n_nodes=30, days=40, seed=2)
    runner = CliRunner()
    end = truth["end"].isoformat()
    over = runner.invoke(app, ["train", "--db", str(db), "--as-of", end, "--max-memory-gb", "0.5"])
    assert over.exit_code == ExitCode.USAGE
    assert "over the 0.5 GB limit" in over.stderr
    since = truth["start"] + timedelta(days=5)
    res = runner.invoke(
        app, ["train", "--db", str(db), "--as-of", end, "--since", since.isoformat(), "--json"]
    )
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    card = json.loads((tmp_path / "models" / doc["model_version"] / "model_card.json").read_text())
    assert datetime.fromisoformat(card["data_window"][0]) >= since


def test_chunked_plan_picks_the_largest_group_that_fits() -> None:
    start = END - timedelta(days=3650)
    plan = plan_training(1524, start, END, limit_gb=8.0, **FR)
    rows = {"max_train_rows": 300_000, "max_calib_rows": 800_000}
    group = check_chunked_plan(plan, END, **FR, **rows)
    hours = plan.hours
    per_node = hours * (2.2 * 0.25 * (len(FEATURES) + 4) * 4 + 32) / GB
    fixed = (
        BASE_GB
        + 2.2 * 1_100_000 * (len(FEATURES) + 4) * 4 / GB
        + 1524 * hours * 0.5 * COMPACT_ROW_B / GB
    )
    assert 1 <= group < 1524
    assert fixed + group * per_node <= 8.0 < fixed + (group + 1) * per_node
    # a limit below the fixed part: stopped, with a --since whose plan fits one node at a time
    small = plan_training(1524, start, END, limit_gb=3.0, **FR)
    with pytest.raises(ConfigError, match=r"over the 3 GB limit even one node") as err:
        check_chunked_plan(small, END, **FR, **rows)
    since = datetime.strptime(err.value.args[0].split("--since ")[1][:10], "%Y-%m-%d")
    later = plan_training(1524, since, END, limit_gb=3.0, **FR)
    assert check_chunked_plan(later, END, **FR, **rows) >= 1

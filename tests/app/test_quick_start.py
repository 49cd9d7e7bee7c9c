"""`faultlens --help` loads none of the heavy libraries: each command imports what it uses."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("polars", "duckdb", "pyarrow", "numpy", "lightgbm", "sklearn", "streamlit", "plotly")

PROBE = """
import json, sys
from typer.testing import CliRunner
from faultlens.app.cli import app
result = CliRunner().invoke(app, sys.argv[1:])
print(json.dumps({"exit": result.exit_code, "out": result.output,
                  "loaded": sorted(m for m in sys.modules if m.split(".")[0] in HEAVY)}))
"""


def _probe(*args: str, heavy: tuple[str, ...] = HEAVY) -> dict:
    code = f"HEAVY = {heavy!r}\n{PROBE}"
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("args", [("--help",), ("ingest", "--help"), ("replay", "--help")])
def test_help_imports_no_heavy_library(args: tuple[str, ...]) -> None:
    doc = _probe(*args)
    assert doc["exit"] == 0
    assert "Example:" in doc["out"] or "Commands" in doc["out"]
    assert {m.split(".")[0] for m in doc["loaded"]} == set(), doc["loaded"]


def test_the_probe_sees_a_command_that_does_load_them(tmp_path) -> None:
    """The same probe, on a command that opens a database, does see DuckDB loaded."""
    doc = _probe("refresh", "--db", str(tmp_path / "t.duckdb"), "--json")
    assert doc["exit"] == 0, doc["out"]
    assert "duckdb" in {m.split(".")[0] for m in doc["loaded"]}


def test_cli_site_dataset_is_the_schema_one() -> None:
    from faultlens.app.common import SITE_DATASET as cli_site
    from faultlens.ingest.schema import SITE_DATASET

    assert cli_site == SITE_DATASET


def test_status_loads_only_duckdb_and_polars(tmp_path) -> None:
    """`faultlens status` (the scheduled job's health check, goal 1 s) reads small tables: no
    numpy, Arrow or model library, and no pydantic (Typer >= 0.29 builds a pydantic adapter per
    parameter: 0.2 s)."""
    db = tmp_path / "t.duckdb"
    assert _probe("refresh", "--db", str(db), "--json")["exit"] == 0
    doc = _probe("status", "--db", str(db), "--json", heavy=(*HEAVY, "pydantic"))
    assert doc["exit"] == 0, doc["out"]
    assert json.loads(doc["out"])["tables"]["events"] == 0
    assert {m.split(".")[0] for m in doc["loaded"]} == {"duckdb", "polars"}, doc["loaded"]


def test_train_precision_refit_and_cross_fit_defaults_are_the_configs() -> None:
    """`faultlens train` states its default without importing the model code (--help stays
    light); the number is the one the evaluation bench trains with."""
    import inspect

    from faultlens.app.cmd_models import train
    from faultlens.models.predictor import TrainConfig

    params = inspect.signature(train).parameters
    assert params["target_precision"].default == TrainConfig().target_precision
    assert params["refit"].default is TrainConfig().refit
    assert params["cross_fit_folds"].default == TrainConfig().cross_fit_folds
    assert params["clear_fraction"].default == TrainConfig().clear_fraction

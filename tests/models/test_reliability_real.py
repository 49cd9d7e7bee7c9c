"""The two real failure data sets, ingested from the CLI as a user would, reproduce figures their
papers publish (LANL: Schroeder & Gibson, DSN 2006; Titan: Ostrouchov et al., SC20)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from faultlens.app.cli import app
from tests.conftest import SHARED

REAL = SHARED / "realdata"
LANL = REAL / "lanl-failures-1996-2005" / "LA-UR-05-7318-failure-data-1996-2005.csv"
TITAN = REAL / "titan-gpu-lifetimes"
runner = CliRunner()


def _cli(*args: str) -> tuple[int, dict]:
    result = runner.invoke(app, list(args))
    try:
        doc = json.loads(result.stdout)
    except ValueError:
        doc = {}
    return result.exit_code, doc


@pytest.fixture(scope="module")
def lanl_db(tmp_path_factory) -> tuple[Path, dict]:
    if not LANL.is_file():
        pytest.fail(f"missing {LANL}")
    db = tmp_path_factory.mktemp("lanl") / "lanl.duckdb"
    code, doc = _cli("ingest", str(LANL), "--dataset", "lanl", "--db", str(db), "--json")
    assert code == 0, doc
    return db, doc


@pytest.fixture(scope="module")
def titan_db(tmp_path_factory) -> tuple[Path, dict]:
    db = tmp_path_factory.mktemp("titan") / "titan.duckdb"
    files = [str(TITAN / "gc_full.csv"), str(TITAN / "gc_summary_loc.csv")]
    code, doc = _cli("ingest", *files, "--dataset", "titan", "--db", str(db), "--json")
    assert code == 0, doc
    return db, doc


def test_lanl_every_record_is_an_incident(lanl_db) -> None:
    _, doc = lanl_db
    (f,) = doc["files"]
    assert f["format"] == "incidents"
    assert f["parsed"] == 23_739  # the release's record count (LA-UR-05-7318)
    assert f["quarantined"] == 0


def test_lanl_decreasing_hazard_and_hardware_first(lanl_db) -> None:
    db, _ = lanl_db
    code, rel = _cli("reliability", "--dataset", "lanl", "--db", str(db), "--json")
    assert code == 0
    assert rel["dataset"] == "lanl"
    lo, hi = rel["weibull"]["shape_ci"]
    assert hi < 1.0 and lo > 0.3  # Schroeder & Gibson: shape 0.7-0.8 per node, i.e. below 1
    assert rel["weibull"]["exponential_aic_delta"] > 0
    by_level = Counter()
    for row in rel["by_category"]:
        by_level[row["level"]] += row["count"]
    assert by_level.most_common(1)[0][0] == "Hardware"  # hardware the largest root cause
    assert by_level["Hardware"] / sum(by_level.values()) > 0.5  # the paper: 30-60%+ per system
    assert rel["repair_h"]["mean"] > 2 * rel["repair_h"]["median"]  # heavy-tailed repairs
    assert sum(r["share"] for r in rel["by_category"]) == pytest.approx(1.0, abs=1e-3)
    # the fleet comes from the systems' sizes in the records, not only the failing nodes
    assert rel["fleet"]["fleet_source"] == "nodes"
    assert rel["nodes"] > 4_000


def test_lanl_stays_out_of_the_site_fleet(lanl_db) -> None:
    db, _ = lanl_db
    code, _ = _cli("reliability", "--db", str(db), "--json")
    assert code == 5  # the site's own dataset is empty: nothing of LANL leaks into it


def test_titan_gpu_years_and_the_old_batch(titan_db) -> None:
    db, doc = titan_db
    assert [f["format"] for f in doc["files"]] == ["unit_residency", "unit_lifetimes"]
    code, rel = _cli("reliability", "--dataset", "titan", "--db", str(db), "--json")
    assert code == 0
    surv = rel["survival"]
    assert surv["unit_years"] > 100_000  # "over 100,000 collective years of operation"
    batch = {b["batch"]: b for b in surv["by_batch"]}
    assert batch["old"]["failures_per_unit_year"] > 10 * batch["new"]["failures_per_unit_year"]
    assert batch["old"]["km_survival"]["5y"] < batch["new"]["km_survival"]["5y"]
    assert rel["fleet"]["gpus_per_node"] == 1  # one K20X per node
    cats = {r["category"] for r in rel["by_category"]}
    assert cats == {"gpu_memory", "gpu"}  # DBE and off the bus


def test_a_profile_fitted_on_lanl_is_what_synth_reads(lanl_db, tmp_path) -> None:
    from faultlens.synth.profile import load_profile

    db, _ = lanl_db
    path = tmp_path / "lanl-profile.json"
    code, rel = _cli(
        "reliability", "--dataset", "lanl", "--db", str(db), "--fit-profile", str(path), "--json"
    )
    assert code == 0
    profile = load_profile(path)
    assert profile["weibull_shape"] < 1.0
    assert profile["failures_per_1000_node_days"] == pytest.approx(
        rel["failures_per_1000_node_days"]
    )
    assert profile["repair_median_h"] == pytest.approx(rel["repair_h"]["median"])
    assert profile["source"]["dataset"] == "lanl"

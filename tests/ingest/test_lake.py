"""Parquet-lake mode: export partitioned Parquet, attach it to a fresh database, same answers."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from bench.bench_scale import make_tree
from faultlens.ingest.errors import ConfigError
from faultlens.ingest.lake import attach_lake, export_lake
from faultlens.ingest.pipeline import ingest_paths
from faultlens.ingest.store import Store
from tests.integration_helpers.dbcompare import table_diff

QUERIES = [
    "SELECT node, code, count(*) AS n FROM events WHERE kind = 'xid' GROUP BY ALL ORDER BY ALL",
    "SELECT state, count(*), sum(n_gpus) FROM jobs GROUP BY ALL ORDER BY ALL",
    "SELECT CAST(ts AS DATE) AS day, source, count(*) FROM events "
    "WHERE ts >= TIMESTAMP '2026-01-02' GROUP BY ALL ORDER BY ALL",
    "SELECT job_id, nodes, exit_code FROM jobs WHERE state = 'FAILED' ORDER BY job_id",
]


@pytest.fixture
def source_db(tmp_path: Path, corpus: Path) -> Path:
    make_tree(tmp_path / "logs", 600_000, 3, seed=9)
    db = tmp_path / "source.duckdb"
    with Store(db) as store:
        ingest_paths(
            store,
            [str(tmp_path / "logs"), str(corpus / "slurm")],
            now=datetime(2026, 2, 1),
        )
    return db


def test_export_then_attach_gives_the_same_tables_and_answers(source_db, tmp_path) -> None:
    lake = tmp_path / "lake"
    with Store(source_db, read_only=True) as store:
        manifest = export_lake(store, lake)
        expected = [store.query(q) for q in QUERIES]
        n_events = store.count("events")
    assert manifest["tables"]["events"] == {"rows": n_events, "partition_by": ["source", "day"]}
    assert (lake / "events" / "source=kernel" / "day=2026-01-01").is_dir()
    assert (lake / "events" / "source=slurm").is_dir()
    assert list((lake / "job_steps").glob("day=*/*.parquet"))

    fresh = tmp_path / "fresh.duckdb"
    done = attach_lake(fresh, lake)
    assert done["events"] == "view" and done["jobs"] == "view"
    assert done["ingested_files"] == "loaded"
    assert table_diff(source_db, fresh) == {}
    with Store(fresh, read_only=True) as store:
        kind = store.scalar(
            "SELECT table_type FROM information_schema.tables WHERE table_name = 'events'"
        )
        got = [store.query(q) for q in QUERIES]
        failed = store.query("SELECT count(*) AS n FROM jobs WHERE state = 'FAILED'").item()
    assert kind == "VIEW"
    assert failed > 0
    for q, a, b in zip(QUERIES, expected, got, strict=True):
        assert a.equals(b), q
    # Reopening read-write (schema migration) keeps the views working.
    with Store(fresh) as store:
        assert store.count("events") == n_events


def test_reexport_replaces_and_attach_refuses_a_database_with_rows(source_db, tmp_path):
    lake = tmp_path / "lake"
    with Store(source_db, read_only=True) as store:
        export_lake(store, lake)
        export_lake(store, lake)  # no doubled files
        n_jobs = store.count("jobs")
    fresh = tmp_path / "fresh.duckdb"
    attach_lake(fresh, lake)
    with Store(fresh, read_only=True) as store:
        assert store.count("jobs") == n_jobs
    with pytest.raises(ConfigError, match="holds rows"):
        attach_lake(source_db, lake)
    with pytest.raises(ConfigError, match="no lake"):
        attach_lake(tmp_path / "x.duckdb", tmp_path / "missing")


def test_lake_cli(source_db, tmp_path) -> None:
    from faultlens.app import cmd_lake

    app = typer.Typer()
    cmd_lake.register(app)

    @app.callback()
    def _root() -> None: ...

    lake = tmp_path / "lake"
    runner = CliRunner()
    res = runner.invoke(app, ["lake", "export", str(lake), "--db", str(source_db), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["tables"]["jobs"]["partition_by"] == ["source", "day"]
    fresh = tmp_path / "fresh.duckdb"
    res = runner.invoke(app, ["lake", "attach", str(lake), "--db", str(fresh), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["tables"]["jobs"] == "view"
    res = runner.invoke(app, ["lake", "attach", str(tmp_path / "nope"), "--db", str(fresh)])
    assert res.exit_code == 2 and "no lake" in res.output

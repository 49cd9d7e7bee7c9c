"""Ingest on a Dask LocalCluster with real worker processes: same rows as the plain path, also when
a worker is killed in the middle of a file (the file is retried, nothing is doubled)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest

from bench.bench_scale import make_tree, write_kernel_log
from faultlens.ingest.attribution import refresh
from faultlens.ingest.pipeline import IngestReport, ingest_paths
from faultlens.ingest.store import Store
from tests.integration_helpers.dbcompare import table_diff

distributed = pytest.importorskip("distributed")

NOW = datetime(2026, 2, 1)
BIG = 32_000_000  # bytes: parsing it takes long enough to kill its worker mid-file


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six small kernel logs, a sacct file, a slurmctld log (``small/``) and one big kernel log."""
    root = tmp_path_factory.mktemp("logs")
    make_tree(root / "small", 3_000_000, 6, seed=3)
    write_kernel_log(root / "gpu-big" / "kern.log", BIG, node="gpu-big", seed=5)
    return root


@pytest.fixture(scope="module")
def plain_db(tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("plain") / "plain.duckdb"
    with Store(db) as store:
        report = ingest_paths(store, [str(tree)], now=NOW)
    assert {f.status for f in report.files} == {"ok"}
    return db


@pytest.fixture(scope="module")
def client():
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as c,
    ):
        yield c


def _counts(db: Path) -> dict[str, int]:
    with Store(db, read_only=True) as s:
        return {t: s.count(t) for t in ("events", "jobs", "job_steps", "ingested_files")}


def test_dask_rows_equal_the_plain_path(tree, plain_db, client, tmp_path) -> None:
    db = tmp_path / "dask.duckdb"
    with Store(db) as store:
        report = ingest_paths(store, [str(tree)], now=NOW, executor=client)
    assert len(report.files) == 9
    assert {f.status for f in report.files} == {"ok"}
    assert table_diff(plain_db, db) == {}
    counts = _counts(db)
    assert counts["ingested_files"] == 9 and counts["jobs"] == 200 and counts["job_steps"] == 200
    with Store(db, read_only=True) as s:
        big = s.query(
            "SELECT count(*) AS n, min(node) AS node FROM events WHERE file LIKE '%gpu-big%'"
        ).row(0, named=True)
    assert big["node"] == "gpu-big" and big["n"] > 10_000
    # Exactly once: a second run on the cluster changes nothing.
    with Store(db) as store:
        again = ingest_paths(store, [str(tree)], now=NOW, executor=client)
    assert {f.status for f in again.files} == {"unchanged"}
    assert _counts(db) == counts


def _worker_reading(client, path: str) -> str | None:
    """The address of the worker whose process has ``path`` open, if any."""

    def reading(target: str = path) -> bool:
        import psutil

        return any(f.path == target for f in psutil.Process().open_files())

    for addr, is_reading in client.run(reading).items():
        if is_reading:
            return addr
    return None


def test_killed_worker_mid_file_is_retried_without_doubling(tree, plain_db, client, tmp_path):
    db = tmp_path / "dask.duckdb"
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    big = str((tree / "gpu-big" / "kern.log").resolve())
    out: dict[str, IngestReport | BaseException] = {}

    def run() -> None:
        try:
            with Store(db) as store:
                out["report"] = ingest_paths(
                    store, [str(tree)], now=NOW, executor=client, scratch=str(scratch)
                )
        except BaseException as e:  # surfaced by the assertions below
            out["error"] = e

    th = threading.Thread(target=run)
    th.start()
    deadline = time.monotonic() + 40
    victim = None
    while victim is None and time.monotonic() < deadline and th.is_alive():
        victim = _worker_reading(client, big)
    assert victim is not None, "no worker was seen parsing the big file"
    pid = client.run(os.getpid, workers=[victim])[victim]
    os.kill(pid, signal.SIGKILL)
    th.join(timeout=90)
    assert not th.is_alive()
    assert "error" not in out, out.get("error")
    report = out["report"]
    assert isinstance(report, IngestReport)
    by_path = {f.path: f for f in report.files}
    assert by_path[big].status == "ok"
    assert by_path[big].lines == by_path[big].parsed + by_path[big].noise
    # The process that was reading the file is gone, so the file's result came from a retry on
    # another worker. (The killed attempt may leave a scratch folder behind, as may results the
    # dead worker held before they were loaded and which the scheduler recomputed.)
    assert pid not in client.run(os.getpid).values()
    assert table_diff(plain_db, db) == {}


def test_cli_dask_local_two_workers(tree, tmp_path) -> None:
    from typer.testing import CliRunner

    from faultlens.app.cli import app

    small = str(tree / "small")
    plain = tmp_path / "plain.duckdb"
    with Store(plain) as store:
        ingest_paths(store, [small], now=NOW)
        refresh(store)  # the CLI joins events to jobs after every ingest
    db = tmp_path / "cli.duckdb"
    res = CliRunner().invoke(
        app, ["ingest", small, "--db", str(db), "--dask", "local", "--workers", "2", "--json"]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout.strip().splitlines()[-1])
    assert doc["totals"]["ok"] == 8 and doc["totals"]["failed"] == 0
    assert all(f["lines"] == f["parsed"] + f["noise"] + f["quarantined"] for f in doc["files"])
    sacct = next(f for f in doc["files"] if f["path"].endswith("sacct.txt"))
    assert (sacct["format"], sacct["lines"], sacct["parsed"]) == ("sacct", 401, 400)
    # The CLI also loads the Xid catalog; the parsed tables equal the plain run's.
    assert table_diff(plain, db, ["events", "jobs", "job_steps", "quarantine"]) == {}

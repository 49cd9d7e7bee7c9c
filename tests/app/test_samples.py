"""The sample inputs in ``data/samples`` (README's first try on a new machine) ingest as
``data/README.md`` says: every file ok, every line parsed or counted as noise, the events on
the lines the samples were written to carry them, the NCCL line without a time kept and
flagged. The expected lines and values are read off the sample files as written (each was
written to hold them), not off the program's output."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from faultlens.app.cli import app
from tests.conftest import REPO

SAMPLES = REPO / "data" / "samples"
runner = CliRunner()


@pytest.fixture(scope="module")
def ingested(tmp_path_factory) -> Iterator[tuple[duckdb.DuckDBPyConnection, str]]:
    """The samples ingested once for the module, as README's quick start does."""
    db = tmp_path_factory.mktemp("samples") / "samples.duckdb"
    result = runner.invoke(app, ["ingest", str(SAMPLES), "--db", str(db)])
    assert result.exit_code == 0, result.output
    con = duckdb.connect(str(db), read_only=True)
    yield con, result.output
    con.close()


def test_every_sample_file_is_ok_and_every_line_is_accounted_for(ingested) -> None:
    con, _ = ingested
    files = con.execute(
        "SELECT path, status, lines, parsed, noise, quarantined FROM ingested_files"
    ).fetchall()
    on_disk = {p.name: p for p in SAMPLES.iterdir() if p.name != "README.md"}
    assert sorted(Path(f[0]).name for f in files) == sorted(on_disk)
    for file, status, lines, parsed, noise, quarantined in files:
        assert status == "ok", file
        assert lines == len(on_disk[Path(file).name].read_text().splitlines()), file
        assert parsed + noise + quarantined == lines, file
        assert quarantined == 0, file


def test_kernel_sample_events_are_on_the_lines_that_carry_them(ingested) -> None:
    con, _ = ingested
    rows = con.execute(
        "SELECT line, node, kind, code, gpu FROM events WHERE file LIKE '%kern.log' ORDER BY line"
    ).fetchall()
    xids = {line: (node, code, gpu) for line, node, kind, code, gpu in rows if kind == "xid"}
    assert xids == {
        3: ("gpu-a07", 63, "0000:18:00.0"),
        5: ("gpu-a07", 48, "0000:18:00.0"),
        6: ("gpu-a07", 94, "0000:18:00.0"),
        7: ("gpu-b02", 79, "0000:9a:00.0"),
        10: ("gpu-b02", 13, "0000:9a:00.0"),
    }
    # Line 8 is the driver's own "fallen off the bus" line; lines 1, 2, 4 and 9 (boot banner,
    # module taint, systemd, cron) are noise.
    assert {r[0] for r in rows} == {3, 5, 6, 7, 8, 10}


def test_nccl_line_without_a_time_is_kept_and_flagged(ingested) -> None:
    con, output = ingested
    rows = con.execute(
        "SELECT line, node, kind, ts FROM events WHERE file LIKE '%nccl-job4812.log'"
    ).fetchall()
    assert [(line, node, kind) for line, node, kind, _ in rows] == [(5, "gpu-a07", "nccl_error")]
    assert rows[0][3] is None
    # ... and the ingest report says so, on that file's row (no time: 1, no node: 0).
    row = next(r for r in output.splitlines() if "nccl-job4812.log" in r)
    assert row.split()[-2:] == ["1", "0"]


def test_jobs_and_incidents_from_the_samples(ingested) -> None:
    con, _ = ingested
    jobs = con.execute("SELECT job_id, state, n_gpus FROM jobs ORDER BY job_id").fetchall()
    assert jobs == [("4812", "NODE_FAIL", 16), ("4813", "COMPLETED", 8), ("4814", "FAILED", 8)]
    incidents = con.execute("SELECT node FROM incidents ORDER BY node").fetchall()
    assert incidents == [("gpu-a07",), ("gpu-b02",)]
    # The Xid 48 of 03:14 on gpu-a07 happened inside job 4812 (00:00-05:31 on gpu-a07, gpu-b02).
    job = con.execute(
        "SELECT job_id FROM events WHERE file LIKE '%kern.log' AND line = 5"
    ).fetchone()
    assert job == ("4812",)
    # The job's failure is the GPU that fell off the bus 26 s before it ended, not the DBE two
    # hours earlier on the other node (the job ran on after it); 4814's Xid 13 is the user's.
    causes = con.execute(
        "SELECT job_id, cause, node, evidence_code FROM attributions ORDER BY job_id"
    ).fetchall()
    assert causes == [
        ("4812", "gpu_hardware", "gpu-b02", 79),
        ("4814", "user_unknown", "gpu-b02", 13),
    ]

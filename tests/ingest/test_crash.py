"""Crash safety: kill -9 at random points of an ingest leaves every file all-or-nothing."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from faultlens.ingest.store import EmptyDatabaseError, Store

NOISE = "Mar  3 10:{m:02d}:{s:02d} {host} CRON[{pid}]: (root) CMD (run-parts /etc/cron.hourly)\n"
XID = (
    "Mar  3 10:{m:02d}:{s:02d} {host} kernel: [ {up}.000001] NVRM: Xid (PCI:0000:3b:00): 79, "
    "pid={pid}, name=python3, GPU has fallen off the bus.\n"
)


def _write_logs(folder: Path, n_files: int, lines_per_file: int) -> list[Path]:
    paths = []
    for f in range(n_files):
        host = f"gpu{f:04d}"
        out = []
        for i in range(lines_per_file):
            tpl = XID if i % 20 == 0 else NOISE
            out.append(tpl.format(m=(i // 60) % 60, s=i % 60, host=host, pid=1000 + i, up=i))
        path = folder / f"{host}.log"
        path.write_text("".join(out))
        paths.append(path)
    return paths


def _ingest_cmd(db: Path, paths: list[Path]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "faultlens.app.cli",
        "ingest",
        "--db",
        str(db),
        "--quiet",
        "--format",
        "kernel",
        *map(str, paths),
    ]


def _per_file(db: Path) -> tuple[dict[str, int], set[str]]:
    try:
        store = Store(db, read_only=True)
    except EmptyDatabaseError:  # killed before its schema was committed: nothing of any file
        return {}, set()
    with store:
        events = dict(store.query("SELECT file, count(*) FROM events GROUP BY file").iter_rows())
        done = set(store.query("SELECT path FROM ingested_files")["path"].to_list())
    return events, done


@pytest.mark.slow
def test_kill_9_never_leaves_part_of_a_file(tmp_path: Path) -> None:
    logs = _write_logs(tmp_path, n_files=6, lines_per_file=40_000)
    clean_db = tmp_path / "clean.duckdb"
    t0 = time.monotonic()
    subprocess.run(_ingest_cmd(clean_db, logs), check=True, cwd=Path(__file__).parents[2])
    clean_s = time.monotonic() - t0
    clean_events, clean_done = _per_file(clean_db)
    assert clean_done == {str(p.resolve()) for p in logs}
    assert set(clean_events.values()) == {2000}

    rng = random.Random(7)
    db = tmp_path / "crashy.duckdb"
    kills = 0
    for _ in range(6):
        proc = subprocess.Popen(
            _ingest_cmd(db, logs),
            cwd=Path(__file__).parents[2],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            proc.wait(timeout=rng.uniform(0.3, max(clean_s, 1.0)))
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            kills += 1
        if not db.exists():
            continue
        events, done = _per_file(db)
        for path, n in events.items():
            assert path in done, f"rows of {path} without its registry row"
            assert n == clean_events[path], f"{path}: {n} rows, clean run has {clean_events[path]}"
    assert kills >= 1
    subprocess.run(_ingest_cmd(db, logs), check=True, cwd=Path(__file__).parents[2])
    assert _per_file(db) == (clean_events, clean_done)

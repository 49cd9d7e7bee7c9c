"""The overview's first screen stored by the writer: a reader of the same generation finds the
results the page asks for, equal to computing them, and uses nothing of another generation or
of other code; the command line's writers store it, a failing hook loses no write."""

from __future__ import annotations

import dataclasses
import functools
import logging
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from faultlens.ingest import hooks, publish
from faultlens.ingest.store import Store
from faultlens.reports import first_screen, q_state
from faultlens.reports.snapshot import SnapshotReader
from tests.reports import smalldb


@pytest.fixture
def saving(monkeypatch: pytest.MonkeyPatch) -> None:
    """Writers of this test store the first screen (as ``faultlens``'s commands do)."""
    monkeypatch.setattr(hooks, "AFTER_PUBLISH", [first_screen.save])


def _published(tmp_path: Path) -> Path:
    db = tmp_path / "w.duckdb"
    publish.enable(db)  # a reader asked before the writer ran
    smalldb.build(db)  # its close publishes generation 1
    return db


def _same(a: object, b: object) -> bool:
    """Equal values, frames compared as frames (also inside dataclasses, tuples and dicts)."""
    if isinstance(a, pl.DataFrame):
        return isinstance(b, pl.DataFrame) and a.equals(b, null_equal=True)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        return type(a) is type(b) and all(
            _same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a)
        )
    if isinstance(a, tuple | list):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def _computed(db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """The first screen as a reader computes it, ignoring what the writer stored."""
    monkeypatch.setenv(first_screen.ENV, "0")
    reader = SnapshotReader(db, tmp_path / "fresh")
    try:
        snap = reader.refresh()
        assert snap.build["first_screen"] == 0
        first_screen.compute(snap)
        return snap.memo.results()
    finally:
        reader.close()
        monkeypatch.delenv(first_screen.ENV)


def test_a_reader_finds_the_writers_first_screen_equal_to_computing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, saving: None
) -> None:
    db = _published(tmp_path)
    folder = publish.folder_of(db)
    assert first_screen.path_of(folder, 1).is_file()
    fresh = _computed(db, tmp_path, monkeypatch)
    incidents = [v for k, v in fresh.items() if k[0].endswith("q_state.incidents")]
    assert incidents and incidents[0].height > 0  # the story's Xid 79 / 48 / 95 are open
    reader = SnapshotReader(db, tmp_path / "snaps")
    try:
        snap = reader.refresh()
        assert snap.build["published_gen"] == 1
        stored = snap.memo.results()
        assert snap.build["first_screen"] == len(stored) == len(fresh)
        assert stored.keys() == fresh.keys()
        for key, value in fresh.items():
            assert _same(stored[key], value), key
        # the page's first run takes them from the memo: a query that would fail is not run
        real = q_state.fleet_state

        @functools.wraps(real)
        def failing(*a: object, **k: object) -> object:
            raise AssertionError("the stored fleet state was computed again")

        monkeypatch.setattr(q_state, "fleet_state", failing)
        first_screen.compute(snap)
    finally:
        reader.close()


def test_the_overviews_ettr_is_stored_and_its_replay_not_run_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, saving: None
) -> None:
    """The ETTR metric (a replay of the range's interruption trace) comes with the first screen:
    the first visitor's run neither waits for it nor runs again once it is ready."""
    from faultlens.reports import q_detail, q_fleet, sections
    from faultlens.reports.filters import default_range
    from faultlens.reports.snapshot import trace_key

    db = _published(tmp_path)
    fresh = _computed(db, tmp_path, monkeypatch)
    reader = SnapshotReader(db, tmp_path / "snaps")
    try:
        snap = reader.refresh()
        since, until = default_range(*snap.call(q_fleet.data_range))
        key = trace_key(sections.ettr_of, since, until)
        assert key in snap.memo and key in fresh
        trace = fresh[next(k for k in fresh if k[0].endswith("q_detail.interruption_trace"))]
        assert trace.n_events > 0  # the story's failures interrupt the fleet-wide job
        expected = sections.ettr_of(trace)
        assert expected is not None and 0.0 < expected < 1.0

        def failing(real: Any) -> Any:
            """``real``'s stand-in (the same memo key) that fails if it is run."""

            @functools.wraps(real)
            def run(*a: object, **k: object) -> object:
                raise AssertionError(f"the stored {real.__name__} was computed again")

            return run

        monkeypatch.setattr(q_detail, "interruption_trace", failing(q_detail.interruption_trace))
        monkeypatch.setattr(sections, "ettr_of", failing(sections.ettr_of))
        assert snap.on_trace(sections.ettr_of, since, until) == expected
    finally:
        reader.close()


def test_a_generation_published_before_gets_its_first_screen_from_the_next_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a writer without the hook (an older faultlens; a command run in this process registered it)
    monkeypatch.setattr(hooks, "AFTER_PUBLISH", [])
    db = _published(tmp_path)
    folder = publish.folder_of(db)
    assert not first_screen.path_of(folder, 1).exists()
    monkeypatch.setattr(hooks, "AFTER_PUBLISH", [first_screen.save])
    store = Store(db)  # a scheduled run with nothing new: the generation stays
    store.close()
    assert store.published["unchanged"] and store.published["gen"] == 1
    assert first_screen.path_of(folder, 1).is_file()
    # another version of the code: its writer stores its own, its readers use only that
    monkeypatch.setattr(first_screen, "code_digest", lambda: "0123456789abcdef")
    assert first_screen.load(folder, 1, bool(publish.read_manifest(folder)["rollups"])) == {}
    Store(db).close()
    assert first_screen.path_of(folder, 1).name == "first-screen-1-0123456789abcdef.pickle"
    assert first_screen.load(folder, 1, bool(publish.read_manifest(folder)["rollups"]))


def _rewrite(path: Path, **changes: object) -> None:
    doc = pickle.loads(path.read_bytes())
    path.write_bytes(pickle.dumps({**doc, **changes}))


def test_results_of_other_code_another_view_or_a_broken_file_are_not_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, saving: None
) -> None:
    db = _published(tmp_path)
    folder = publish.folder_of(db)
    path = first_screen.path_of(folder, 1)
    rollups = bool(publish.read_manifest(folder)["rollups"])
    assert first_screen.load(folder, 1, rollups)
    assert first_screen.load(folder, 1, not rollups) == {}  # computed on the other view
    assert first_screen.load(folder, 2, rollups) == {}  # no file for that generation
    good = path.read_bytes()
    _rewrite(path, code="another version")
    assert first_screen.load(folder, 1, rollups) == {}
    path.write_bytes(good)
    _rewrite(path, gen=7)  # renamed from another generation's
    assert first_screen.load(folder, 1, rollups) == {}
    path.write_bytes(good[: len(good) // 2])  # cut short
    with caplog.at_level(logging.WARNING):
        assert first_screen.load(folder, 1, rollups) == {}
    assert "unreadable" in caplog.text
    reader = SnapshotReader(db, tmp_path / "snaps")
    try:
        snap = reader.refresh()  # the page computes them itself
        assert snap.build["first_screen"] == 0 and snap.store.scalar("SELECT 1") == 1
    finally:
        reader.close()


def test_only_the_kept_generations_keep_their_file(tmp_path: Path, saving: None) -> None:
    db = _published(tmp_path)
    folder = publish.folder_of(db)
    for i in range(first_screen.KEEP + 1):
        with Store(db) as store:
            store.execute(f"INSERT INTO jobs (job_id, state) VALUES ('k{i}', 'FAILED')")
    gen = int(publish.read_manifest(folder)["gen"])
    assert gen == first_screen.KEEP + 2
    kept = sorted(int(p.name.split("-")[2]) for p in folder.glob("first-screen-*.pickle"))
    assert kept == list(range(gen - first_screen.KEEP + 1, gen + 1))


def test_a_failing_hook_loses_neither_the_write_nor_the_publish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(folder: Path, manifest: dict) -> None:
        raise RuntimeError("disk full")

    monkeypatch.setattr(hooks, "AFTER_PUBLISH", [broken])
    with caplog.at_level(logging.WARNING):
        db = _published(tmp_path)
    assert "broken failed: disk full" in caplog.text
    manifest = publish.read_manifest(publish.folder_of(db))
    assert manifest is not None and manifest["gen"] == 1
    with Store(db, read_only=True) as store:
        assert store.scalar("SELECT count(*) FROM jobs") == len(smalldb.jobs())


def test_the_command_lines_writers_store_it(tmp_path: Path) -> None:
    """``faultlens ingest``, as a user runs it, on a database a dashboard reads."""
    log = tmp_path / "kern.log"
    log.write_text(
        "Mar  1 10:00:00 gpu001 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen "
        "off the bus.\n"
    )
    db = tmp_path / "cli.duckdb"
    publish.enable(db)
    done = subprocess.run(
        [sys.executable, "-m", "faultlens.app.cli", "ingest", str(log), "--db", str(db)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    folder = publish.folder_of(db)
    manifest = publish.read_manifest(folder)
    assert manifest is not None
    stored = first_screen.load(folder, int(manifest["gen"]), bool(manifest["rollups"]))
    spans = [v for k, v in stored.items() if k[0].endswith("q_state.data_span")]
    assert spans and spans[0].height > 0

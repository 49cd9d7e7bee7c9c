"""Readers without copies: what the writer publishes equals its tables, costs what is new, and a
reader follows a live writer process without blocking it or seeing half a write."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import polars as pl
import pytest

from faultlens.ingest import publish, rollups
from faultlens.ingest.store import Store
from faultlens.reports.snapshot import SnapshotReader
from tests.reports import smalldb

BLOCK = 64  # rowids per block in these tests: a few hundred events span several blocks
T0 = datetime(2025, 3, 1)


@pytest.fixture(autouse=True)
def _small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(publish, "BLOCK_ROWS", BLOCK)


def _batch(first: int, n: int) -> pl.DataFrame:
    """``n`` events numbered from ``first``: line ``i`` at ``T0 + i`` minutes."""
    idx = list(range(first, first + n))
    return pl.DataFrame(
        {
            "ts": [T0 + timedelta(minutes=i) for i in idx],
            "node": [f"gpu{i % 4:03d}" for i in idx],
            "source": ["kernel"] * n,
            "kind": ["xid" if i % 10 == 0 else "diag" for i in idx],
            "code": [79 if i % 10 == 0 else None for i in idx],
            "severity": ["critical" if i % 10 == 0 else "info" for i in idx],
            "message": [f"event {i}" for i in idx],
            "file": ["/logs/kern.log"] * n,
            "line": [i + 1 for i in idx],
        }
    )


def _rows(con: duckdb.DuckDBPyConnection, table: str) -> list[tuple]:
    return con.execute(f"SELECT * FROM {table} ORDER BY ALL").fetchall()


def _assert_same(db: Path) -> dict:
    """Every table of the writer's file, read back from the published view, row for row."""
    manifest = publish.read_manifest(publish.folder_of(db))
    assert manifest is not None
    src = duckdb.connect(str(db), read_only=True)
    pub = duckdb.connect(str(publish.folder_of(db) / manifest["small"]), read_only=True)
    try:
        tables = [
            r[0]
            for r in src.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'"
            ).fetchall()
        ]
        assert "events" in tables and "rollup_notable" in tables
        for t in tables:
            assert _rows(pub, t) == _rows(src, t), t
    finally:
        src.close()
        pub.close()
    return manifest


def _write(db: Path, frame: pl.DataFrame) -> dict:
    store = Store(db)
    with store.transaction():
        store.insert("events", frame)
    rollups.maintain(store, relinked=False)  # publishes, after the refresh
    done = getattr(store, "published", {})  # none before a reader asked for it
    store.close()  # nothing changed since: no new generation
    assert not publish.enabled(store) or store.published["unchanged"]
    return done


def test_published_view_is_the_writers_tables(tmp_path: Path) -> None:
    db = smalldb.build(tmp_path / "small.duckdb")
    publish.enable(db)
    with Store(db) as store:
        rollups.maintain(store)
    manifest = _assert_same(db)
    assert manifest["rollups"] is True  # the rollups count every event: readers use them
    src = duckdb.connect(str(db), read_only=True)
    expected = src.execute("SELECT * FROM gpu_inventory ORDER BY ALL").fetchall()
    pub = duckdb.connect(str(publish.folder_of(db) / manifest["small"]), read_only=True)
    assert pub.execute("SELECT * FROM gpu_inventory ORDER BY ALL").fetchall() == expected


def test_a_publish_writes_only_the_new_rows(tmp_path: Path) -> None:
    db = tmp_path / "w.duckdb"
    publish.enable(db)
    first = _write(db, _batch(0, 300))
    assert first["rows_written"]["events"] == 300
    done = _write(db, _batch(300, 10))
    # event 300 is an Xid (every tenth); the day's counts were merged into rows kept before
    # (one block of them: written again)
    day_counts = duckdb.connect(str(db), read_only=True).sql("FROM rollup_node_day").shape[0]
    assert done["rows_written"] == {
        "events": 10,
        "rollup_notable": 1,
        "rollup_node_day": day_counts,
    }
    manifest = _assert_same(db)
    events = manifest["tables"]["events"]
    assert events["n"] == 310 and events["top"] == 309
    # blocks of 64 rowids: 0-63, ..., 256-299 then the new 300-309 in the same block
    assert [(p["lo"], p["hi"]) for p in events["parts"]][-2:] == [(256, 299), (300, 309)]


def test_small_parts_of_a_block_are_merged(tmp_path: Path) -> None:
    db = tmp_path / "w.duckdb"
    publish.enable(db)
    for k in range(publish.MAX_PARTS + 1):  # all in block 0 (rowids 0..8)
        _write(db, _batch(k, 1))
    parts = _assert_same(db)["tables"]["events"]["parts"]
    assert [(p["lo"], p["hi"], p["n"]) for p in parts] == [(0, publish.MAX_PARTS, 9)]


def test_rows_updated_in_place_are_republished(tmp_path: Path) -> None:
    db = tmp_path / "w.duckdb"
    publish.enable(db)
    _write(db, _batch(0, 300))
    store = Store(db)
    with store.transaction():  # a relink of old events: rowids 70 (an Xid) and 71, block 1
        store.execute("UPDATE events SET job_id = '77' WHERE line IN (71, 72)")
    rollups.maintain(store, relinked=True)
    done = store.published
    store.close()
    assert done["checked"] == ["events", "rollup_notable"]
    notable = 300 // 10  # every tenth event is an Xid: all in the copy's block 0
    assert done["rows_written"] == {"events": BLOCK, "rollup_notable": notable}
    manifest = _assert_same(db)
    pub = duckdb.connect(str(publish.folder_of(db) / manifest["small"]), read_only=True)
    assert pub.execute(
        "SELECT list(line ORDER BY line) FROM events WHERE job_id = '77'"
    ).fetchone()[0] == [71, 72]


def test_deleted_rows_republish_the_table(tmp_path: Path) -> None:
    db = tmp_path / "w.duckdb"
    publish.enable(db)
    _write(db, _batch(0, 200))
    store = Store(db)
    with store.transaction():  # what a reparse does to a file's rows
        store.execute("DELETE FROM events WHERE line > 150")
        store.insert("events", _batch(150, 20))
    rollups.maintain(store)
    store.close()
    manifest = _assert_same(db)
    assert manifest["tables"]["events"]["n"] == 170


def test_the_reader_opens_the_published_view_without_a_copy(tmp_path: Path) -> None:
    db = tmp_path / "w.duckdb"
    _write(db, _batch(0, 100))  # before any reader: nothing published, the reader copies
    reader = SnapshotReader(db, tmp_path / "snaps")
    try:
        snap = reader.refresh()
        assert snap is not None and "copy_s" in snap.build and snap.owned
        assert publish.folder_of(db).is_dir()  # the reader asked the writers to publish
        _write(db, _batch(100, 50))
        snap = reader.refresh()
        assert snap.build["published_gen"] == 1 and not snap.owned
        assert snap.store.scalar("SELECT count(*) FROM events") == 150
        assert snap.store.rollups  # the writer's rollups count every event
        assert not list((tmp_path / "snaps").glob("**/*.duckdb"))  # no copy taken
        assert reader.refresh() is snap  # nothing new published: the same view
        store = Store(db)  # a writer that changes nothing (a scheduled run with no new data)
        store.close()
        assert store.published["unchanged"] and store.published["gen"] == 1
        assert reader.refresh() is snap  # the view and its computed results stay
        _write(db, _batch(150, 1))
        assert reader.refresh().build["published_gen"] == 2
    finally:
        reader.close()


WRITER = textwrap.dedent("""
    import sys
    from datetime import datetime, timedelta
    import polars as pl
    from faultlens.ingest import publish, rollups
    from faultlens.ingest.store import Store
    publish.BLOCK_ROWS = 64
    path, batches, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    for b in range(batches):
        store = Store(path)
        rows = pl.DataFrame({"ts": [datetime(2025, 1, 1) + timedelta(minutes=b)] * size,
                             "node": [f"n{b % 3}"] * size, "kind": ["xid"] * size,
                             "severity": ["critical"] * size, "line": list(range(size))})
        with store.transaction():  # a batch and its job: all or nothing
            store.insert("events", rows)
            store.execute("INSERT INTO jobs (job_id, state) VALUES (?, 'FAILED')", [str(b)])
        if b % 3 == 2:  # a relink of every older batch's events, in place
            with store.transaction():
                store.execute("UPDATE events SET job_id = 'j' WHERE job_id IS NULL")
        rollups.maintain(store, relinked=b % 3 == 2)
        store.close()
    print("done", flush=True)
""")


def _check_view(store) -> tuple[int, int]:  # noqa: ANN001
    """One view's invariants: whole batches, each with its job; the rollups count every event;
    a relink is seen whole or not at all. Returns (events, jobs)."""
    n, linked = store.query("SELECT count(*), count(job_id) FROM events").row(0)
    jobs = store.scalar("SELECT count(*) FROM jobs")
    counted = store.scalar("SELECT coalesce(sum(n), 0) FROM rollup_fleet_hour")
    notable = store.scalar("SELECT count(*) FROM rollup_notable")
    notable_linked = store.scalar("SELECT count(job_id) FROM rollup_notable")
    assert n == 50 * jobs and counted == n and notable == n, (n, jobs, counted, notable)
    assert linked == notable_linked and linked % 50 == 0
    relinks = jobs // 3  # after batch 3k+2, every batch up to it is linked
    assert linked == 50 * 3 * relinks, (linked, jobs)
    return n, jobs


def test_a_reader_follows_a_live_writer_process(tmp_path: Path) -> None:
    db = tmp_path / "live.duckdb"
    Store(db).close()
    reader = SnapshotReader(db, tmp_path / "snaps")  # asks for publishing before the writer runs
    batches = 12
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(db), str(batches), "50"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: set[int] = set()
    errors: list[BaseException] = []

    def read() -> None:
        try:
            while writer.poll() is None:
                snap = reader.refresh()
                if snap is not None and "published_gen" in snap.build:
                    seen.add(_check_view(snap.store)[1])
        except BaseException as e:  # reported below, in the test's thread
            errors.append(e)

    thread = threading.Thread(target=read)
    thread.start()
    try:
        out, err = writer.communicate(timeout=300)
        thread.join(timeout=60)
        assert writer.returncode == 0, err  # the writer never failed to open or commit
        assert out.strip() == "done"
        assert not errors, errors
        last = reader.refresh()
        assert last.build.get("published_gen") == batches
        assert _check_view(last.store) == (50 * batches, batches)
        assert len(seen) >= 2  # views published while the writer ran were read
    finally:
        writer.kill()
        reader.close()


def test_a_write_by_a_writer_that_does_not_publish_falls_back_to_a_copy(tmp_path: Path) -> None:
    import os

    from faultlens.reports import snapshot

    db = tmp_path / "w.duckdb"
    publish.enable(db)
    _write(db, _batch(0, 100))
    con = duckdb.connect(str(db))  # an older faultlens: writes without publishing
    con.execute("INSERT INTO events (node, kind) VALUES ('gpu900', 'xid')")
    con.close()
    later = (db.stat().st_mtime_ns + int(2 * snapshot.STALE_PUBLISH_S * 1e9)) / 1e9
    os.utime(db, (later, later))
    mark = publish.folder_of(db) / f"writer-{os.getpid()}"
    mark.touch()  # a live writer that publishes is at work: wait for its publish
    reader = SnapshotReader(db, tmp_path / "snaps")
    try:
        snap = reader.refresh()
        assert snap.build.get("published_gen") == 1
        assert snap.store.scalar("SELECT count(*) FROM events") == 100
        mark.unlink()  # none at work: the file was changed by a writer that does not publish
        snap = reader.refresh()
        assert "copy_s" in snap.build
        assert snap.store.scalar("SELECT count(*) FROM events") == 101
    finally:
        reader.close()

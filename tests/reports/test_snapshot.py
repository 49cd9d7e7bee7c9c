"""Reading while another process writes: the snapshot never blocks nor fails the writer."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import polars as pl
import pytest

from faultlens.ingest.store import Store
from faultlens.reports.snapshot import SnapshotReader

WRITER = textwrap.dedent("""
    import sys
    from datetime import datetime, timedelta
    import polars as pl
    from faultlens.ingest.store import Store
    path, batches = sys.argv[1], int(sys.argv[2])
    with Store(path) as store:
        print("open", flush=True)
        sys.stdin.readline()  # the reader took a snapshot while we hold the file read-write
        for b in range(batches):
            rows = pl.DataFrame({"ts": [datetime(2025, 1, 1) + timedelta(minutes=b)] * 100,
                                 "node": ["n1"] * 100, "kind": ["xid"] * 100})
            with store.transaction():
                store.insert("events", rows)
            print(f"batch {b}", flush=True)
            sys.stdin.readline()
    print("done", flush=True)
""")


def _events(store: Store) -> int:
    return int(store.scalar("SELECT count(*) FROM events"))


def test_reader_follows_a_live_writer_without_blocking_it(db_path: Path, tmp_path: Path) -> None:
    with Store(db_path) as store:
        store.insert("events", pl.DataFrame({"node": ["n0"] * 10, "kind": ["xid"] * 10}))
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(db_path), "3"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    reader = SnapshotReader(db_path, tmp_path / "snaps")
    try:
        assert writer.stdout.readline().strip() == "open"
        first = reader.refresh()  # the writer holds a read-write connection right now
        assert first is not None and _events(first.store) == 10
        seen = []
        for b in range(3):
            writer.stdin.write("\n")
            writer.stdin.flush()
            assert writer.stdout.readline().strip() == f"batch {b}"
            snap = reader.refresh()
            seen.append(_events(snap.store))
        writer.stdin.write("\n")
        writer.stdin.flush()
        assert writer.stdout.readline().strip() == "done"
        assert writer.wait(timeout=60) == 0  # the writer never failed to open or commit
    finally:
        writer.kill()
        reader.close()
    # every committed batch of 100 is seen, and only whole transactions
    assert seen == [110, 210, 310]


def test_unchanged_source_keeps_the_snapshot(db_path: Path, tmp_path: Path) -> None:
    Store(db_path).close()
    reader = SnapshotReader(db_path, tmp_path / "snaps")
    first = reader.refresh()
    assert reader.refresh() is first
    assert not reader.stale()
    reader.close()


def test_missing_database_gives_no_snapshot(tmp_path: Path) -> None:
    reader = SnapshotReader(tmp_path / "absent.duckdb", tmp_path / "snaps")
    assert reader.refresh() is None
    assert "no database" in (reader.last_error or "")


def test_failed_copy_keeps_serving_the_last_snapshot(db_path: Path, tmp_path: Path) -> None:
    with Store(db_path) as store:
        store.insert("events", pl.DataFrame({"node": ["n0"], "kind": ["xid"]}))
    reader = SnapshotReader(db_path, tmp_path / "snaps")
    first = reader.refresh()
    db_path.write_bytes(b"not a duckdb file" * 100)  # changed and unreadable
    assert reader.refresh() is first
    assert _events(first.store) == 1
    assert "serving the previous one" in (reader.last_error or "")
    reader.close()


def test_background_refresh_serves_the_previous_snapshot_until_the_new_one_is_ready(
    db_path: Path, tmp_path: Path
) -> None:
    import threading

    from faultlens.reports import q_fleet

    with Store(db_path) as store:
        store.insert("events", pl.DataFrame({"node": ["n0"], "kind": ["xid"]}))
    release = threading.Event()
    warmed: list[int] = []

    def warm(snap) -> None:  # noqa: ANN001
        if snap.version > 1:
            assert release.wait(timeout=60)  # the new snapshot is held back until we say so
        warmed.append(snap.call(q_fleet.node_list) and snap.version)

    reader = SnapshotReader(db_path, tmp_path / "snaps", warm=warm)
    try:
        first = reader.refresh_in_background()  # the first one is taken right away
        assert first is not None and first.version == 1 and first.store.rollups
        assert reader.warming is not None  # the first is served at once, warmed beside it
        reader.warming.join(timeout=60)
        assert warmed == [1]
        with Store(db_path) as store:
            store.insert("events", pl.DataFrame({"node": ["n1"], "kind": ["xid"]}))
        assert reader.refresh_in_background() is first  # still served while the copy is built
        assert reader.refresh_in_background() is first  # and no second copy is started
        release.set()
        reader._background.join(timeout=60)
        second = reader.current
        assert second is not None and second.version == 2 and warmed == [1, 2]
        assert _events(second.store) == 2
        assert second.call(q_fleet.node_list) == ["n0", "n1"]  # from the warmed memo
    finally:
        release.set()
        reader.close()


def test_memo_computes_once_and_forgets_failures() -> None:
    from faultlens.reports.snapshot import Memo

    memo, calls = Memo(max_entries=2), []
    assert memo.get("a", lambda: calls.append("a") or 1) == 1
    assert memo.get("a", lambda: calls.append("a") or 2) == 1
    assert calls == ["a"]

    def fail() -> int:
        raise ValueError("boom")

    for _ in range(2):  # a failure is raised to every caller, never kept
        with pytest.raises(ValueError, match="boom"):
            memo.get("b", fail)
    assert "b" not in memo
    memo.get("c", lambda: 3)
    memo.get("d", lambda: 4)  # two entries at most: the least recently used goes
    assert "a" not in memo and "c" in memo and "d" in memo

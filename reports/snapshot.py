"""Reading a database that another process may be writing: what its writers publish, or a copy.

DuckDB lets one process hold a read-write connection, and then no other process can open the file,
not even read-only; and a reader holding the file would make ``faultlens ingest`` / ``run`` fail
to open it. So readers (the dashboard, ``faultlens report``) never open the live file.

A reader asks the writers to publish for it (``ingest.publish.enable``): from then on every writer,
when it closes the database, publishes a consistent view (Parquet parts of the big tables, written
only for what is new, and a small DuckDB file with the other tables and views over the parts),
named by a manifest replaced atomically. The reader opens that small file read-only: no copy, and
a new view costs the reader one file open.

Where there is no published view (a database written before, or by a writer of an older version,
or one changed by such a writer since the last publish: its file is newer than the manifest by
``STALE_PUBLISH_S`` and no writer that publishes is at work), the reader falls back to a private
copy of the file and its write-ahead log (which holds the committed transactions not yet
checkpointed).
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import shutil
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from faultlens.ingest import publish
from faultlens.ingest.errors import StoreError
from faultlens.ingest.store import Store
from faultlens.reports import first_screen, rollups

log = logging.getLogger(__name__)

Stat = tuple[int, int, int] | None  # (size, mtime_ns, inode) or None when absent
# A database file newer than its published view by this much was written by a writer that does
# not publish (an older version): the reader copies it instead.
STALE_PUBLISH_S = 120.0
FIRST_WARM_WAIT_S = 30.0


def _stat(path: Path) -> Stat:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ino)


def _wal(path: Path) -> Path:
    return Path(str(path) + ".wal")


class SnapshotStore(Store):
    """A read-only ``Store`` over a snapshot file; each query uses its own cursor (thread-safe).

    ``rollups`` says whether the aggregate tables of ``reports.rollups`` are in the file."""

    def __init__(self, path: str | Path, *, rollups: bool = False) -> None:
        super().__init__(path, read_only=True)
        self.rollups = rollups
        # where models.target reads failure events: the rollup copy holds all of them
        self.notable_table = "rollup_notable" if rollups else None
        # where models.fleet counts the nodes that log in a whole-day window
        self.node_day_table = "rollup_node_day" if rollups else None

    def query(self, sql: str, params: Any = None) -> pl.DataFrame:
        cur = self.con.cursor()
        try:
            rel = cur.sql(sql, params=list(params) if params else None)
            if rel is None:
                raise StoreError("query() is for statements that return rows")
            return rel.pl()
        except duckdb.Error as e:
            raise StoreError(f"query failed: {e}") from e
        finally:
            cur.close()

    def scalar(self, sql: str, params: Any = None) -> Any:
        cur = self.con.cursor()
        try:
            rows = cur.execute(sql, list(params) if params else []).fetchall()
        except duckdb.Error as e:
            raise StoreError(f"query failed: {e}") from e
        finally:
            cur.close()
        return rows[0][0] if rows else None


def freeze(value: Any) -> Any:
    """A hashable stand-in for arguments (dicts and lists become sorted / plain tuples)."""
    if isinstance(value, dict):
        return tuple(sorted((k, freeze(v)) for k, v in value.items()))
    if isinstance(value, list | tuple | set):
        items = [freeze(v) for v in value]
        return tuple(sorted(items, key=repr) if isinstance(value, set) else items)
    return value


def call_key(fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> Hashable:
    """The memo key of ``fn(store, *args, **kwargs)`` on a snapshot (``Snapshot.call``)."""
    return (f"{fn.__module__}.{fn.__qualname__}", freeze(args), freeze(kwargs))


def trace_key(
    fn: Callable[..., Any],
    since: datetime | None,
    until: datetime | None,
    args: tuple = (),
    kwargs: dict[str, Any] | None = None,
) -> Hashable:
    """The memo key of ``fn(trace, *args, **kwargs)`` on the range's interruption trace
    (``Snapshot.on_trace``)."""
    fn_name = f"{fn.__module__}.{fn.__qualname__}"
    return ("trace", fn_name, since, until, freeze(args), freeze(kwargs or {}))


class Memo:
    """Results computed on one snapshot, each once: a caller asking for a key being computed
    waits for that computation instead of repeating it. Failures are not kept."""

    def __init__(self, max_entries: int = 512) -> None:
        self._lock = threading.Lock()
        self._items: OrderedDict[Hashable, Future] = OrderedDict()
        self.max_entries = max_entries

    def _future(self, key: Hashable) -> tuple[Future, bool]:
        """The future of ``key`` and whether the caller must compute it (it is new)."""
        with self._lock:
            fut = self._items.get(key)
            if fut is not None:
                self._items.move_to_end(key)
                return fut, False
            fut = self._items[key] = Future()
            while len(self._items) > self.max_entries:
                self._items.popitem(last=False)
            return fut, True

    def _compute(self, key: Hashable, fut: Future, compute: Callable[[], Any]) -> None:
        try:
            fut.set_result(compute())
        except BaseException as e:
            with self._lock:
                self._items.pop(key, None)
            fut.set_exception(e)

    def get(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        fut, owner = self._future(key)
        if owner:
            self._compute(key, fut, compute)
        return fut.result()

    def submit(self, key: Hashable, compute: Callable[[], Any]) -> Future:
        """The future of ``key``, computed in a background thread unless it already is."""
        fut, owner = self._future(key)
        if owner:
            threading.Thread(
                target=self._compute, args=(key, fut, compute), daemon=True, name="faultlens-memo"
            ).start()
        return fut

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._items

    def put(self, key: Hashable, value: Any) -> None:
        """``key``'s result, computed elsewhere (a result already here or being computed stays)."""
        with self._lock:
            if key in self._items:
                return
            fut = self._items[key] = Future()
            fut.set_result(value)

    def results(self) -> dict[Hashable, Any]:
        """The results computed so far (not those being computed, nor failures)."""
        with self._lock:
            done = [(k, f) for k, f in self._items.items() if f.done()]
        return {k: f.result() for k, f in done if f.exception() is None}


@dataclass
class Snapshot:
    store: SnapshotStore
    path: Path
    source_stat: tuple[Stat, Stat]
    as_of: datetime  # the source file's mtime (UTC) when it was copied
    version: int  # increases with every new snapshot: a cache key for query results
    build: dict[str, Any] = field(default_factory=dict)  # seconds spent copying / rolling up
    memo: Memo = field(default_factory=Memo)  # query results on this snapshot
    owned: bool = True  # a private copy (removed when replaced), not a writer's published file

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(store, *args, **kwargs)``, computed once per snapshot and arguments."""
        return self.memo.get(call_key(fn, args, kwargs), lambda: fn(self.store, *args, **kwargs))

    def on_trace(
        self,
        fn: Callable[..., Any],
        since: datetime | None,
        until: datetime | None,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        """``fn(trace, *args, **kwargs)`` on the range's interruption trace (read from this
        snapshot once, ``q_detail.interruption_trace``), computed once per snapshot and
        arguments."""
        from faultlens.reports.q_detail import interruption_trace

        trace = self.call(interruption_trace, since, until)
        key = trace_key(fn, since, until, args, kwargs)
        return self.memo.get(key, lambda: fn(trace, *args, **kwargs))


class SnapshotReader:
    """The latest consistent snapshot of ``source``; ``refresh()`` copies it again if it changed."""

    def __init__(
        self,
        source: str | Path,
        workdir: str | Path | None = None,
        *,
        with_rollups: bool = True,
        warm: Callable[[Snapshot], None] | None = None,
        published: bool = True,
        warm_after: threading.Event | None = None,
    ) -> None:
        self.source = Path(source).resolve()
        self.with_rollups = with_rollups
        # read what the writers publish (and ask them to): no copy per write
        self.folder = publish.folder_of(self.source) if published else None
        if self.folder is not None and self.source.parent.is_dir():
            publish.enable(self.source)
        # fills a new snapshot's memo: before it is served, or beside the pages for the first
        self.warm = warm
        digest = hashlib.sha256(str(self.source).encode()).hexdigest()[:12]
        base = Path(workdir) if workdir else Path(tempfile.gettempdir())
        self.workdir = base / f"faultlens-snapshots-{os.getpid()}-{digest}"
        self._lock = threading.Lock()
        self._current: Snapshot | None = None
        self._version = 0
        self._background: threading.Thread | None = None
        self._background_lock = threading.Lock()  # not ``_lock``: a refresh holds that one long
        self.warming: threading.Thread | None = None  # warms the first snapshot while it serves
        # the first snapshot's warming waits for this (at most ``FIRST_WARM_WAIT_S``): the first
        # page's own queries do not share two cores with every other page's
        self.warm_after = warm_after
        self._closing = threading.Event()
        self.last_error: str | None = None
        _remove_orphans(base)
        atexit.register(self.close)

    @property
    def current(self) -> Snapshot | None:
        return self._current

    def stale(self) -> bool:
        """Whether the source changed since the snapshot being served was taken."""
        cur = self._current
        return cur is None or cur.source_stat != self._source_stats()

    def _source_stats(self) -> tuple[Stat, Stat]:
        """The published manifest's (then the second is None), or the file's and its WAL's."""
        db = (_stat(self.source), _stat(_wal(self.source)))
        if self.folder is None:
            return db
        manifest = _stat(self.folder / publish.MANIFEST)
        if manifest is None:
            return db
        newest = max((s[1] for s in db if s is not None), default=0)
        if (newest - manifest[1]) / 1e9 > STALE_PUBLISH_S and not publish.writer_at_work(
            self.folder
        ):
            return db  # written since by a writer that does not publish
        return (manifest, None)

    def _same_generation(self, before: tuple[Stat, Stat]) -> bool:
        """A manifest touched by a publish that found nothing new: the view being served stays
        (its computed results with it)."""
        cur = self._current
        if cur is None or cur.owned or not self._published(before):
            return False
        manifest = publish.read_manifest(self.folder) if self.folder else None
        if manifest is None or manifest.get("gen") != cur.build.get("published_gen"):
            return False
        cur.source_stat = before
        return True

    def _published(self, before: tuple[Stat, Stat]) -> bool:
        return self.folder is not None and before[0] == _stat(self.folder / publish.MANIFEST)

    def refresh(self) -> Snapshot | None:
        """Take a new snapshot if the source changed and can be copied consistently."""
        with self._lock:
            if not self.stale():
                return self._current
            before = self._source_stats()
            if self._same_generation(before):
                return self._current
            if before[0] is None:
                self.last_error = f"no database at {self.source}"
                return self._current
            self._version += 1
            target = self.workdir / f"snap-{self._version}.duckdb"
            try:
                if self._published(before):
                    snap = self._open_published(before)
                else:
                    snap = self._copy(before, target)
            except (OSError, StoreError, ValueError, KeyError) as e:
                self.last_error = f"snapshot failed, serving the previous one: {e}"
                log.warning("%s", self.last_error)
                _remove(target)
                return self._current
            first = self._current is None
            if not first:  # the previous snapshot serves while this one warms
                self._warm(snap)
            old, self._current = self._current, snap
            self.last_error = None
            if old is not None and old.owned:
                _remove(old.path)  # open handles keep the old file alive until they close
        if first:  # nothing served before it: serve it now, warm it while the pages ask
            self.warming = threading.Thread(
                target=self._warm_first, args=(snap,), daemon=True, name="faultlens-warm"
            )
            self.warming.start()
        return snap

    def refresh_in_background(self) -> Snapshot | None:
        """The snapshot being served; a changed source is copied in a background thread.

        The first snapshot is taken in the caller's thread (there is nothing to serve before it);
        later ones are built while the previous one keeps answering."""
        if self._current is None:
            return self.refresh()
        with self._background_lock:
            busy = self._background is not None and self._background.is_alive()
            if not busy and self.stale():
                self._background = threading.Thread(
                    target=self.refresh, daemon=True, name="faultlens-snapshot"
                )
                self._background.start()
        return self._current

    def _open_published(self, before: tuple[Stat, Stat]) -> Snapshot:
        """The writers' published view, opened read-only (nothing copied)."""
        assert self.folder is not None
        t0 = time.perf_counter()
        manifest = publish.read_manifest(self.folder)
        if manifest is None:
            raise StoreError(f"no readable manifest in {self.folder}")
        path = self.folder / manifest["small"]
        kept = bool(manifest["rollups"]) and self.with_rollups
        store = SnapshotStore(path, rollups=kept)
        store.scalar("SELECT count(*) FROM information_schema.tables")
        build: dict[str, Any] = {
            "published_gen": manifest["gen"],
            "open_s": round(time.perf_counter() - t0, 3),
            "rollups": "kept by ingest" if kept else "none: pages read events",
        }
        as_of = datetime.fromisoformat(manifest["published_at"])
        snap = Snapshot(store, path, before, as_of, self._version, build, owned=False)
        # what the writer computed on this generation for the overview's first screen
        stored = first_screen.load(self.folder, int(manifest["gen"]), kept)
        for key, value in stored.items():
            snap.memo.put(key, value)
        build["first_screen"] = len(stored)
        return snap

    def _copy(self, before: tuple[Stat, Stat], target: Path) -> Snapshot:
        self.workdir.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        shutil.copyfile(self.source, target)
        if before[1] is not None:
            shutil.copyfile(_wal(self.source), _wal(target))
        after = self._source_stats()
        if after != before:
            raise StoreError("the database changed while it was being copied")
        build: dict[str, Any] = {"copy_s": round(time.perf_counter() - t0, 2)}
        store = SnapshotStore(target)
        store.scalar("SELECT count(*) FROM information_schema.tables")
        if self.with_rollups and rollups.ready(store):  # kept by ingest: used as they are
            store.rollups, store.notable_table = True, "rollup_notable"
            store.node_day_table = "rollup_node_day"
            build["rollups"] = "kept by ingest"
        elif self.with_rollups:
            store.close()
            store = SnapshotStore(target, rollups=self._roll_up(target, build))
        as_of = datetime.fromtimestamp(before[0][1] / 1e9, UTC).replace(tzinfo=None)
        if before[1] is not None:
            as_of = max(as_of, datetime.fromtimestamp(before[1][1] / 1e9, UTC).replace(tzinfo=None))
        return Snapshot(store, target, before, as_of, self._version, build)

    def _warm_first(self, snap: Snapshot) -> None:
        if self.warm_after is not None:  # (or until the reader closes: then nothing to warm)
            deadline = time.monotonic() + FIRST_WARM_WAIT_S
            while not self.warm_after.wait(timeout=0.1) and time.monotonic() < deadline:
                if self._closing.is_set():
                    return
        if not self._closing.is_set():
            self._warm(snap)

    def _warm(self, snap: Snapshot) -> None:
        if self.warm is None:
            return
        t0 = time.perf_counter()
        try:
            self.warm(snap)
        except Exception:  # a view that fails to warm computes (and reports) when it is opened
            log.exception("warming the snapshot's views failed")
        snap.build["warm_s"] = round(time.perf_counter() - t0, 2)

    @staticmethod
    def _roll_up(target: Path, build: dict[str, Any]) -> bool:
        """Bring the private copy's rollups up to date (the writer had not yet, or never does);
        without them queries read ``events``."""
        try:
            with Store(target) as rw:
                build["rollups"] = rollups.prepare(rw)
                rw.execute("CHECKPOINT")
        except (StoreError, ValueError) as e:
            log.warning("no rollups for this snapshot, pages read the events table: %s", e)
            return False
        return True

    def close(self) -> None:
        self._closing.set()  # a warm-up still waiting for the first page run does not start
        if self.warming is not None:
            self.warming.join(timeout=60)  # its queries hold the snapshot's connection
        with self._lock:
            if self._current is not None:
                try:
                    self._current.store.close()
                except duckdb.Error as e:  # a query still running: the process is ending
                    log.warning("closing the snapshot: %s", e)
                self._current = None
            shutil.rmtree(self.workdir, ignore_errors=True)


def _remove(path: Path) -> None:
    for p in (path, _wal(path)):
        try:
            p.unlink()
        except FileNotFoundError:
            pass


def _remove_orphans(base: Path) -> None:
    """Delete snapshot folders left by readers that died without cleaning up."""
    for folder in base.glob("faultlens-snapshots-*-*"):
        try:
            pid = int(folder.name.split("-")[2])
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except (ValueError, IndexError, PermissionError):
            continue

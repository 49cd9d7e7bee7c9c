"""What the writer publishes for readers: a consistent read-only view, without copying the database.

DuckDB lets one process open a file read-write, or many read-only, never both: a reader holding
the live file would make ``faultlens ingest`` / ``run`` fail to open it. So readers (the dashboard,
``faultlens report``) never open it; the writer publishes what they read into ``<db>.readers/``
when it closes the database (``Store.close``), once a reader asked for it (``enable``):

- the append-mostly tables (``APPEND``: events, telemetry, ..., rollup_notable) as Parquet parts
  by rowid, in blocks of ``BLOCK_ROWS`` rowids: each publish writes the rows above the last one's
  top as new parts (its cost is what is new); a block's parts are merged into one when more than
  ``MAX_PARTS`` pile up. Each part keeps the fingerprint of its rows (xor of row hashes over the
  columns the writer updates in place). When the writer says old rows may have been updated
  (``mark_changed``: the rollups' upkeep after a relink or a rebuild), the fingerprints of the
  whole table are compared block by block and the blocks that differ are written again. Rows
  deleted or renumbered (the count at or below the top, or the top row, changed) republish the
  table whole.
- every other table (jobs, attributions, predictions, the count rollups, ...) copied into a small
  DuckDB file, which also holds views over the parts and the schema's views.

A generation is named by ``manifest.json``, written under a temporary name and renamed, so a reader
sees the previous generation or the new one, never a mix. Files of the last ``KEEP`` generations
are kept, so that a reader still on one keeps answering.
"""

from __future__ import annotations

import json
import logging
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from faultlens.ingest import hooks
from faultlens.ingest.errors import StoreError
from faultlens.ingest.schema import ROLLUP_VIEWS, VIEWS

# ``ingest.store.Store``, not imported: ``Store.close`` calls ``on_close``, so the store imports us
Store = Any

log = logging.getLogger(__name__)

SUFFIX = ".readers"
MANIFEST = "manifest.json"
FORMAT = 1
BLOCK_ROWS = 1 << 19
MAX_PARTS = 8
KEEP = 3
_PUB = "faultlens_publish"  # the small file, attached to the writer's connection while written
CHECK_ROW = "publish_check"  # rollup_state's row naming the tables whose old rows may have changed
# Published as Parquet parts; the columns whose in-place updates their fingerprint catches
# (None: every column).
APPEND: dict[str, tuple[str, ...] | None] = {
    "events": ("ts", "node", "node_source", "ts_flag", "gpu_index", "job_id"),
    "telemetry": None,
    "nccl_ranks": None,
    "link_health": None,
    "train_steps": None,
    "quarantine": None,
    "rollup_notable": ("job_id", "gpu_index"),
    "rollup_node_day": None,  # counts merged in place: marked changed whenever events are added
    "predictions": None,  # one set per run: grows with every scheduled run
}


def folder_of(db: str | Path) -> Path:
    return Path(str(db) + SUFFIX)


def enable(db: str | Path) -> Path:
    """Ask the writers of ``db`` to publish for readers from now on (the folder's existence)."""
    folder = folder_of(Path(db).resolve())
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def enabled(store: Store) -> bool:
    return store.path != ":memory:" and folder_of(Path(store.path).resolve()).is_dir()


def read_manifest(folder: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads((folder / MANIFEST).read_text())
    except (FileNotFoundError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("format") == FORMAT else None


def mark_changed(store: Store, tables: tuple[str, ...]) -> None:
    """Record that old rows of ``tables`` may have been updated in place (the next publish
    compares their fingerprints); kept in ``rollup_state`` until a publish has checked them."""
    seen = _pending_checks(store)
    store.execute("DELETE FROM rollup_state WHERE tbl = ?", [CHECK_ROW])
    store.execute(
        "INSERT INTO rollup_state VALUES (?, 0, 0, 0, ?)",
        [CHECK_ROW, json.dumps(sorted(seen | set(tables)))],
    )


def _pending_checks(store: Store) -> set[str]:
    try:
        row = store.query("SELECT mark FROM rollup_state WHERE tbl = ?", [CHECK_ROW])
    except StoreError:  # no rollup tables yet
        return set()
    return set(json.loads(row.item(0, 0))) if row.height else set()


def _writer_mark(store: Store) -> Path:
    return folder_of(Path(store.path).resolve()) / f"writer-{os.getpid()}"


def on_open(store: Store) -> None:
    """``Store.__init__``'s hook (read-write): say a writer that will publish is at work, so that
    readers wait for its publish instead of copying the file it is changing."""
    if enabled(store):
        try:
            _writer_mark(store).touch()
        except OSError as e:
            log.warning("cannot mark the writer for readers: %s", e)


def writer_at_work(folder: Path) -> bool:
    """Whether a live process that publishes holds (or held) the database read-write."""
    for mark in folder.glob("writer-*"):
        try:
            os.kill(int(mark.name.split("-", 1)[1]), 0)
        except ProcessLookupError:
            mark.unlink(missing_ok=True)  # a writer that died: its publish never comes
            continue
        except (ValueError, PermissionError):
            continue
        return True
    return False


def now(store: Store) -> None:
    """Publish if readers asked for it (the end of a refresh, and ``Store.close``); a failure is
    logged, never raised (the writer's own work is committed either way; the next publish of
    this or another writer brings readers up to date)."""
    if not enabled(store):
        return
    try:
        done = publish(store, folder_of(Path(store.path).resolve()))
        store.published = done  # what the last publish did (benchmarks and tests read it)
        log.info("published for readers: %s", done)
    except (StoreError, OSError, ValueError) as e:
        log.warning("publishing for readers failed (readers keep the previous view): %s", e)
        return
    _after(folder_of(Path(store.path).resolve()))


def _after(folder: Path) -> None:
    """The registered ``hooks.AFTER_PUBLISH`` on the generation just published (or kept)."""
    manifest = read_manifest(folder) if hooks.AFTER_PUBLISH else None
    if manifest is None:
        return
    for hook in hooks.AFTER_PUBLISH:
        t0 = time.perf_counter()
        try:
            hook(folder, manifest)
        except Exception as e:  # noqa: BLE001 - readers compute it themselves; the write stands
            log.warning("after publishing, %s failed: %s", getattr(hook, "__name__", hook), e)
        log.info(
            "after publishing: %s in %.2f s",
            getattr(hook, "__name__", hook),
            time.perf_counter() - t0,
        )


def on_close(store: Store) -> None:
    """``Store.close``'s hook: publish, then the writer is no longer at work."""
    try:
        now(store)
    finally:
        if enabled(store):
            _writer_mark(store).unlink(missing_ok=True)


def _columns(store: Store, table: str) -> list[tuple[str, str]]:
    frame = store.query(
        "SELECT column_name, data_type FROM information_schema.columns "
        "WHERE table_name = ? AND table_schema = 'main' AND table_catalog = current_database() "
        "ORDER BY ordinal_position",
        [table],
    )
    return list(frame.iter_rows())


def _base_tables(store: Store) -> list[str]:
    frame = store.query(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
        "AND table_catalog = current_database() AND table_type = 'BASE TABLE' ORDER BY 1"
    )
    return frame["table_name"].to_list()


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


class _Table:
    """One append-mostly table's parts: publishes its new rows, re-publishes changed blocks."""

    def __init__(self, store: Store, folder: Path, name: str, gen: int) -> None:
        self.store, self.folder, self.name, self.gen = store, folder, name, gen
        self.columns = _columns(store, name)
        cols = APPEND[name] or tuple(c for c, _ in self.columns)
        # hashed twice: DuckDB combines the columns' hashes by xor, so one change made to many
        # rows (a job id set on two rows of a block) would cancel out in the block's xor
        self.fp_sql = f"hash(hash(rowid, {', '.join(_q(c) for c in cols)}))"
        self.written = 0

    def _range_stats(self, lo: int, hi: int) -> tuple[int, int]:
        n, fp = self.store.query(
            f"SELECT count(*), coalesce(bit_xor({self.fp_sql}), 0) FROM {_q(self.name)} "
            "WHERE rowid BETWEEN ? AND ?",
            [lo, hi],
        ).row(0)
        return int(n), int(fp)

    def _write(self, lo: int, hi: int) -> dict[str, Any] | None:
        """A part of the rows with ``lo <= rowid <= hi`` (None when there are none)."""
        n, fp = self._range_stats(lo, hi)
        if not n:
            return None
        rel = f"{self.name}/b{lo // BLOCK_ROWS:06d}-{lo}-{hi}-g{self.gen}.parquet"
        (self.folder / self.name).mkdir(exist_ok=True)
        cols = ", ".join(_q(c) for c, _ in self.columns)
        self.store.execute(
            f"COPY (SELECT {cols} FROM {_q(self.name)} WHERE rowid BETWEEN ? AND ? "
            f"ORDER BY rowid) TO {_lit(str(self.folder / rel))} "
            "(FORMAT parquet, COMPRESSION zstd)",
            [lo, hi],
        )
        self.written += n
        return {"file": rel, "lo": lo, "hi": hi, "n": n, "fp": fp}

    def _identity(self, rowid: int) -> str:
        if rowid < 0:
            return ""
        rows = self.store.query(
            f"SELECT {self.fp_sql} FROM {_q(self.name)} WHERE rowid = ?", [rowid]
        )
        return json.dumps(rows.rows())

    def _same_rows(self, prev: dict[str, Any]) -> bool:
        """Whether the rows at or below the published top are still the ones published."""
        n = self.store.scalar(
            f"SELECT count(*) FROM {_q(self.name)} WHERE rowid <= ?", [prev["top"]]
        )
        return int(n) == prev["n"] and self._identity(prev["top"]) == prev["ident"]

    def _changed_blocks(self, parts: list[dict[str, Any]], top: int) -> set[int]:
        """The blocks whose rows' fingerprint is not their parts' (rows updated in place)."""
        kept: dict[int, list[int]] = {}
        for p in parts:
            acc = kept.setdefault(p["lo"] // BLOCK_ROWS, [0, 0])
            acc[0] += p["n"]
            acc[1] ^= p["fp"]
        now = self.store.query(
            f"SELECT rowid // {BLOCK_ROWS} AS blk, count(*) AS n, bit_xor({self.fp_sql}) AS fp "
            f"FROM {_q(self.name)} WHERE rowid <= ? GROUP BY ALL",
            [top],
        )
        seen = {int(b): [int(n), int(fp)] for b, n, fp in now.iter_rows()}
        return {b for b in kept.keys() | seen.keys() if kept.get(b) != seen.get(b)}

    def _rewrite(self, parts: list[dict[str, Any]], blocks: set[int], top: int) -> list[dict]:
        out = [p for p in parts if p["lo"] // BLOCK_ROWS not in blocks]
        for b in sorted(blocks):
            part = self._write(b * BLOCK_ROWS, min(top, (b + 1) * BLOCK_ROWS - 1))
            if part:
                out.append(part)
        return sorted(out, key=lambda p: p["lo"])

    def publish(self, prev: dict[str, Any] | None, check: bool) -> dict[str, Any]:
        top_now = self.store.scalar(f"SELECT max(rowid) FROM {_q(self.name)}")
        top_now = -1 if top_now is None else int(top_now)
        same_columns = prev is not None and prev.get("columns") == [list(c) for c in self.columns]
        if prev is None or not same_columns or not self._same_rows(prev):
            prev = {"top": -1, "parts": []}
            check = False
        parts, top = list(prev["parts"]), int(prev["top"])
        if check and parts:
            parts = self._rewrite(parts, self._changed_blocks(parts, top), top)
        lo = top + 1
        while lo <= top_now:  # the new rows: one part per block they fall in
            hi = min(top_now, (lo // BLOCK_ROWS + 1) * BLOCK_ROWS - 1)
            part = self._write(lo, hi)
            if part:
                parts.append(part)
            lo = hi + 1
        per_block: dict[int, int] = {}
        for p in parts:
            per_block[p["lo"] // BLOCK_ROWS] = per_block.get(p["lo"] // BLOCK_ROWS, 0) + 1
        piled = {b for b, k in per_block.items() if k > MAX_PARTS}
        if piled:  # merge a block's small parts into one
            parts = self._rewrite(parts, piled, top_now)
        return {
            "top": top_now,
            "n": sum(p["n"] for p in parts),
            "ident": self._identity(top_now),
            "columns": [list(c) for c in self.columns],
            "parts": parts,
        }

    def view_sql(self, folder: Path, parts: list[dict[str, Any]]) -> str:
        if not parts:
            cols = ", ".join(f"CAST(NULL AS {t}) AS {_q(c)}" for c, t in self.columns)
            return f"SELECT {cols} WHERE false"
        files = ", ".join(_lit(str(folder / p["file"])) for p in parts)
        cols = ", ".join(f"CAST({_q(c)} AS {t}) AS {_q(c)}" for c, t in self.columns)
        return f"SELECT {cols} FROM read_parquet([{files}])"


def _rollups_current(store: Store) -> bool:
    """Whether the rollups count every event (their watermark is the events' top and count)."""
    try:
        mark = store.query("SELECT max_rowid, n_rows FROM rollup_state WHERE tbl = 'events'")
    except StoreError:
        return False
    if not mark.height:
        return False
    top, n = store.query("SELECT max(rowid), count(*) FROM events").row(0)
    return (-1 if top is None else int(top), int(n)) == tuple(mark.row(0))


def _small_source(name: str) -> str:
    if name == "rollup_state":  # the pending check is the writer's own
        return f"SELECT * FROM main.rollup_state WHERE tbl <> {_lit(CHECK_ROW)}"
    return f"SELECT * FROM main.{_q(name)}"


def _fingerprint(store: Store, name: str) -> list[int]:
    """(rows, xor of row hashes) of a small table: whether it changed since the last publish."""
    n, fp = store.query(
        f"SELECT count(*), coalesce(bit_xor(hash(hash(*COLUMNS(*)))), 0) "
        f"FROM ({_small_source(name)})"
    ).row(0)
    return [int(n), int(fp)]


def _same(old: dict[str, Any] | None, tables: dict, small: dict, rollups: bool) -> bool:
    if old is None:
        return False
    before = (old.get("tables"), old.get("small_fp"), old.get("rollups"))
    return json.dumps(before, sort_keys=True) == json.dumps(
        (tables, small, rollups), sort_keys=True
    )


def _fill_small(store: Store, folder: Path, present: list[str], views: dict[str, str]) -> None:
    """The small file's tables, the views over the parts, the schema's views."""
    for name in present:
        if name in views:
            store.execute(f"CREATE VIEW {_PUB}.main.{_q(name)} AS {views[name]}")
        else:
            store.execute(f"CREATE TABLE {_PUB}.main.{_q(name)} AS {_small_source(name)}")
    for name, body in VIEWS.items():  # bound in the small file: over its tables
        store.execute(f"CREATE VIEW {_PUB}.main.{_q(name)} AS {body}")
    if "rollup_node_day" in present:
        for ddl in ROLLUP_VIEWS.values():
            store.execute(ddl.replace("VIEW rollup_", f"VIEW {_PUB}.main.rollup_", 1))


def publish(store: Store, folder: Path) -> dict[str, Any]:
    """Publish the current state of ``store`` (read-write, the writer's) into ``folder``; a
    state already published (nothing changed) is left as it is, so readers keep their view."""
    t0 = time.perf_counter()
    old = read_manifest(folder)
    gen = int(old["gen"]) + 1 if old else 1
    checks = _pending_checks(store)
    small_name = f"small-{gen}.duckdb"
    tmp = folder / f"{small_name}.tmp"
    tmp.unlink(missing_ok=True)
    store.execute(f"ATTACH {_lit(str(tmp))} AS {_PUB}")
    tables: dict[str, Any] = {}
    views: dict[str, str] = {}
    small: dict[str, list[int]] = {}
    written: dict[str, int] = {}
    try:
        with store.transaction():  # one snapshot of the writer's tables
            present = _base_tables(store)
            for name in present:
                if name in APPEND:
                    t = _Table(store, folder, name, gen)
                    prev = (old or {}).get("tables", {}).get(name)
                    tables[name] = t.publish(prev, check=name in checks)
                    if t.written:
                        written[name] = t.written
                    views[name] = t.view_sql(folder, tables[name]["parts"])
                else:
                    small[name] = _fingerprint(store, name)
            rollups = _rollups_current(store)
            unchanged = _same(old, tables, small, rollups)
            if not unchanged:
                _fill_small(store, folder, present, views)
    finally:
        store.execute(f"DETACH {_PUB}")
    if checks:  # checked: the parts hold the rows as they are now
        store.execute("DELETE FROM rollup_state WHERE tbl = ?", [CHECK_ROW])
    if unchanged and old is not None:
        tmp.unlink(missing_ok=True)
        Path(f"{tmp}.wal").unlink(missing_ok=True)
        os.utime(folder / MANIFEST)  # still current: readers do not take the file for newer
        return {
            "gen": old["gen"],
            "unchanged": True,
            "rows_written": {},
            "checked": sorted(checks),
            "files_removed": 0,
            "seconds": round(time.perf_counter() - t0, 3),
        }
    os.replace(tmp, folder / small_name)
    files = [small_name, *(p["file"] for t in tables.values() for p in t["parts"])]
    recent = [files, *((old or {}).get("recent", []))][:KEEP]
    manifest = {
        "format": FORMAT,
        "gen": gen,
        "published_at": datetime.now(UTC).replace(tzinfo=None).isoformat(),
        "small": small_name,
        "rollups": rollups,
        "tables": tables,
        "small_fp": small,
        "recent": recent,
    }
    staged = folder / f"{MANIFEST}.tmp"
    staged.write_text(json.dumps(manifest))
    os.replace(staged, folder / MANIFEST)
    removed = _collect(folder, {f for gen_files in recent for f in gen_files})
    return {
        "gen": gen,
        "rows_written": written,
        "checked": sorted(checks),
        "files_removed": removed,
        "seconds": round(time.perf_counter() - t0, 3),
    }


def _collect(folder: Path, keep: set[str]) -> int:
    """Remove the files no kept generation names (and what a failed publish left)."""
    removed = 0
    for path in [*folder.glob("small-*"), *folder.glob("*/*.parquet")]:
        rel = path.relative_to(folder).as_posix()
        if rel not in keep:
            path.unlink(missing_ok=True)
            removed += 1
    return removed

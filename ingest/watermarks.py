"""Watermarks of ``refresh()``: what it had seen of the tables it reads, kept in ``refresh_state``.

Rows are appended with increasing rowids, so after a refresh the rows above its watermark are the
new ones. A rowid is a position, not an identity: DuckDB renumbers rows when a checkpoint compacts
deleted ones, and ``--reparse`` deletes a file's rows. So a watermark is trusted only while the
rows at or below it are provably the ones seen: their count, the identity of the row at the mark,
the number of events still without a time (a learned boot time gives old rows one), the
ingested-files registry (a file re-read in place, not grown) and the Xid catalog's digest. When
any of these changed, ``why_full`` says why and the caller rebuilds everything.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass

import polars as pl

from faultlens.ingest.store import Store

log = logging.getLogger(__name__)

# The appended tables refresh reads, and the columns that identify the row at a watermark.
ROW_TABLES: dict[str, str] = {
    "events": "file, line, ts, node, gpu, kind, code, job_id, gpu_index",
    "jobs": 'job_id, state, "end", start, file, line',
    "gpus": "node, gpu_index, pci_bus_id, last_seen, file",
}
NO_MARK = -1  # the watermark of an empty table: every row is above it


@dataclass(frozen=True)
class Mark:
    max_rowid: int
    n_rows: int
    untimed: int = 0
    mark: str = ""


def _row_identity(store: Store, table: str, rowid: int) -> str:
    cols = ROW_TABLES[table]
    rows = store.query(f"SELECT {cols} FROM {table} WHERE rowid = ?", [rowid])
    return json.dumps(rows.rows(), default=str)


def _registry_digest(store: Store) -> str:
    frame = store.query(
        "SELECT path || '|' || coalesce(fingerprint, '') || '|' || coalesce(head_len, 0) AS k, "
        "lines, parsed, quarantined FROM ingested_files"
    )
    return json.dumps({r[0]: list(r[1:]) for r in frame.rows()}, default=str, sort_keys=True)


def _catalog_digest(store: Store) -> str:
    return str(
        store.scalar(
            "SELECT md5(coalesce(string_agg(xid || ':' || coalesce(category, ''), ',' "
            "ORDER BY xid), '')) FROM xid_catalog"
        )
    )


def current(store: Store) -> dict[str, Mark]:
    """The marks of the database as it is now (taken at the end of a refresh)."""
    marks: dict[str, Mark] = {}
    for table in ROW_TABLES:
        n_rows, max_rowid = store.query(f"SELECT count(*), max(rowid) FROM {table}").row(0)
        top = NO_MARK if max_rowid is None else int(max_rowid)
        untimed = 0
        if table == "events":
            untimed = int(store.scalar("SELECT count(*) FROM events WHERE ts IS NULL") or 0)
        ident = _row_identity(store, table, top) if top != NO_MARK else ""
        marks[table] = Mark(top, int(n_rows), untimed, ident)
    marks["ingested_files"] = Mark(
        NO_MARK, store.count("ingested_files"), 0, _registry_digest(store)
    )
    marks["xid_catalog"] = Mark(NO_MARK, store.count("xid_catalog"), 0, _catalog_digest(store))
    return marks


def load(store: Store) -> dict[str, Mark]:
    frame = store.query("SELECT tbl, max_rowid, n_rows, untimed, mark FROM refresh_state")
    return {r[0]: Mark(int(r[1]), int(r[2]), int(r[3] or 0), r[4] or "") for r in frame.rows()}


def save(store: Store, marks: dict[str, Mark]) -> None:
    """Replace the stored marks (call inside the refresh's last transaction)."""
    store.execute("DELETE FROM refresh_state")
    store.insert(
        "refresh_state",
        pl.DataFrame(
            [
                {"tbl": t, "max_rowid": m.max_rowid, "n_rows": m.n_rows, "untimed": m.untimed}
                | {"mark": m.mark}
                for t, m in marks.items()
            ]
        ),
    )


def _registry_rewritten(before: str, now: str) -> str | None:
    """A file the registry knew that is gone, shrank, or was re-read in place (a reparse)."""
    old, new = json.loads(before or "{}"), json.loads(now or "{}")
    for key, (lines, parsed, quarantined) in old.items():
        if key not in new:
            return f"file {key.split('|')[0]} left the registry"
        n_lines, n_parsed, n_quarantined = new[key]
        if (n_lines or 0) < (lines or 0):
            return f"file {key.split('|')[0]} has fewer lines than before"
        if n_lines == lines and (n_parsed, n_quarantined) != (parsed, quarantined):
            return f"file {key.split('|')[0]} was parsed again"
    return None


def why_full(store: Store, prior: dict[str, Mark]) -> str | None:
    """Why the rows at or below the stored marks may not be the ones last seen (None: they are)."""
    if not prior or any(t not in prior for t in (*ROW_TABLES, "ingested_files", "xid_catalog")):
        return "no watermarks yet"
    for table in ROW_TABLES:
        p = prior[table]
        kept = int(
            store.scalar(f"SELECT count(*) FROM {table} WHERE rowid <= ?", [p.max_rowid]) or 0
        )
        if kept != p.n_rows:
            return f"{table}: {p.n_rows - kept} rows at or below the watermark changed"
        if p.max_rowid != NO_MARK and _row_identity(store, table, p.max_rowid) != p.mark:
            return f"{table}: the rows were renumbered or replaced"
    untimed = int(
        store.scalar(
            "SELECT count(*) FROM events WHERE rowid <= ? AND ts IS NULL",
            [prior["events"].max_rowid],
        )
        or 0
    )
    if untimed != prior["events"].untimed:
        return "events: old rows were given a time"
    if _catalog_digest(store) != prior["xid_catalog"].mark:
        return "the Xid catalog changed"
    return _registry_rewritten(prior["ingested_files"].mark, _registry_digest(store))


# What a prediction reads: the tables of features, alerts and attribution. A write to any of them
# changes the count or the top rowid (appends, a reparse's delete + insert) or the registry of
# ingested files (a reparse, a boot time learned for old rows) or the per-file summary.
PREDICTION_INPUTS = (
    "events",
    "telemetry",
    "jobs",
    "gpus",
    "nodes",
    "attributions",
    "dataset_files",
    "incidents",
    "xid_catalog",
    "nccl_ranks",
)


def data_mark(store: Store) -> str:
    """A digest of the database's prediction inputs as they are now: equal digests mean that
    nothing a prediction reads was written in between (cheap: counts, top rowids and the small
    registry tables, never a scan of ``events``)."""
    parts: list[object] = []
    kinds = {
        r["table_name"]: r["table_type"]
        for r in store.records(
            "SELECT table_name, table_type FROM information_schema.tables "
            "WHERE table_schema = current_schema()"
        )
    }
    for table in PREDICTION_INPUTS:
        if table not in kinds:  # (a database made before the table, opened read-only)
            continue
        # a lake's table is a view over Parquet files: no rowid, its count follows the files
        top = "max(rowid)" if kinds[table] == "BASE TABLE" else "NULL"
        parts.append([table, *store.query(f"SELECT count(*), {top} FROM {table}").row(0)])
    parts.append(
        store.query(
            "SELECT count(*), max(ingested_at), sum(lines), sum(bytes), sum(parsed), "
            "sum(quarantined) FROM ingested_files"
        ).row(0)
    )
    parts.append(
        store.query(
            f"SELECT count(*), sum(n), sum(no_ts), max(last_ts) FROM {store.summary_source()}"
        ).row(0)
    )
    parts.append(_catalog_digest(store))
    digest = hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()
    return digest[:32]

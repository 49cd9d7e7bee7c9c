"""All database access of faultlens goes through this module.

``Store`` wraps one DuckDB connection. Opening it read-write creates the schema declared in
``ingest.schema`` and migrates older databases (``schema_version`` table); opening it
read-only never
writes. Values always travel as ``?`` parameters; driver errors become ``StoreError`` with the cause
chained. Table and column names in SQL come only from ``ingest.schema``, never from user input.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from faultlens.ingest.errors import LockedError, StoreError
from faultlens.ingest.schema import (
    SCHEMA_VERSION,
    TABLES,
    TELEMETRY_SOURCE,
    VIEWS,
    conform,
    view_ddl,
)

log = logging.getLogger(__name__)

DEFAULT_DB = Path("data/faultlens.duckdb")
# DuckDB's own default is 80% of RAM; past this limit it spills to disk instead of growing.
# Callers pass their own (the CLI: ``$FAULTLENS_DUCKDB_MEMORY``, e.g. "8GB" for a big fleet).
DEFAULT_MEMORY = "1GB"
# DuckDB's limit while a parsed file's Parquet parts are appended (``pipeline.load``): the tables
# have no index, so the inserts stream and need little of it, while the buffers DuckDB fills up to
# its limit come on top of the parser's own memory at its peak. On the 1 GB mixed node log
# (bench.bench_ingest_mixed, quiet machine) the process peaked at 1,006-1,028 MiB with the 1 GB
# limit and at 946 MiB with 512 MB, in the same time (256 MB: 820 MiB, 14% slower).
LOAD_MEMORY = "512MB"


def memory_bytes(limit: str, con: duckdb.DuckDBPyConnection | None = None) -> int | None:
    """``"512MB"`` / ``"1 GiB"`` as bytes, read by DuckDB's own ``parse_formatted_bytes`` (as it
    reads its ``memory_limit``) on ``con`` (a fresh in-memory one without it); None: not a size,
    e.g. a percentage."""
    db = con if con is not None else duckdb.connect()
    try:
        row = db.execute("SELECT parse_formatted_bytes(?)", [limit]).fetchone()
    except duckdb.Error:
        return None
    finally:
        if con is None:
            db.close()
    return int(row[0]) if row and row[0] is not None else None


# Migrations from version N-1 to N: each a list of SQL statements. Version 1 is the initial schema,
# created from TABLES; later versions append ALTER statements here.
MIGRATIONS: dict[int, list[str]] = {
    2: ["ALTER TABLE ingested_files ADD COLUMN IF NOT EXISTS tail_fingerprint VARCHAR"],
    3: ["ALTER TABLE events ADD COLUMN IF NOT EXISTS node_source VARCHAR"],
    4: [  # the nodes' listed state; event_summary from the rows already there; the pull's
        # marks out of ingested_files
        "ALTER TABLE nodes ADD COLUMN IF NOT EXISTS state VARCHAR",
        "DELETE FROM event_summary",
        "INSERT INTO event_summary SELECT 'events', file, source, kind, node, count(*), "
        "count(*) FILTER (WHERE ts IS NULL), max(ts) FROM events GROUP BY ALL",
        f"INSERT INTO event_summary SELECT 'telemetry', NULL, '{TELEMETRY_SOURCE}', NULL, node, "
        "count(*), count(*) FILTER (WHERE ts IS NULL), max(ts) FROM telemetry GROUP BY ALL",
        "INSERT INTO prom_marks SELECT regexp_extract(path, '^prometheus:(.*)#([^#]*)$', 1), "
        "regexp_extract(path, '^prometheus:(.*)#([^#]*)$', 2), epoch_ms(bytes), lines, "
        "ingested_at FROM ingested_files WHERE format = 'prometheus_pull'",
        "DELETE FROM ingested_files WHERE format = 'prometheus_pull'",
    ],
    5: [  # the newest row per node and source is read from event_summary alone
        "DROP TABLE IF EXISTS source_last_seen",
        "DROP TABLE IF EXISTS source_last_seen_marks",
    ],
    6: [  # MIG instances and Kubernetes workloads as telemetry series of their own
        "ALTER TABLE telemetry ADD COLUMN IF NOT EXISTS gpu_instance INTEGER",
        "ALTER TABLE telemetry ADD COLUMN IF NOT EXISTS gpu_profile VARCHAR",
        "ALTER TABLE telemetry ADD COLUMN IF NOT EXISTS pod VARCHAR",
        "ALTER TABLE telemetry ADD COLUMN IF NOT EXISTS namespace VARCHAR",
        "ALTER TABLE telemetry ADD COLUMN IF NOT EXISTS container VARCHAR",
    ],
    7: [  # why a job's printed time was not read (SLURM_TIME_FORMAT)
        "ALTER TABLE jobs ADD COLUMN IF NOT EXISTS time_flag VARCHAR",
    ],
}

# event_summary computed from the tables themselves: what a database older than the summary
# (opened read-only, so not migrated) answers with, and what tests compare the summary with.
SUMMARY_FROM_TABLES = (
    "(SELECT 'events' AS tbl, file, source, kind, node, count(*) AS n, "
    "count(*) FILTER (WHERE ts IS NULL) AS no_ts, max(ts) AS last_ts FROM events GROUP BY ALL "
    f"UNION ALL SELECT 'telemetry', NULL, '{TELEMETRY_SOURCE}', NULL, node, count(*), "
    "count(*) FILTER (WHERE ts IS NULL), max(ts) FROM telemetry GROUP BY ALL)"
)
_STAGE = "_faultlens_new_events"  # a file's new events, fixed up before they join ``events``


class DatabaseBusyError(LockedError, StoreError):
    """Another process holds the database open for writing (DuckDB allows one writer)."""


class EmptyDatabaseError(StoreError):
    """The file opens but holds no faultlens tables."""


class Store:
    """One connection to a faultlens database file (or ``:memory:``)."""

    def __init__(
        self,
        path: str | Path = ":memory:",
        *,
        read_only: bool = False,
        memory_limit: str = DEFAULT_MEMORY,
    ) -> None:
        self.path = str(path)
        self.read_only = read_only
        self.memory_limit = memory_limit
        try:
            if not read_only and self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            if read_only and self.path != ":memory:" and not Path(self.path).exists():
                raise StoreError(
                    f"no database at {self.path}: run `faultlens ingest` or `faultlens demo`"
                )
            self.con = duckdb.connect(
                self.path,
                read_only=read_only,
                config={
                    "memory_limit": memory_limit,
                    # Readers always ORDER BY; not keeping insertion order makes loads cheaper.
                    "preserve_insertion_order": False,
                },
            )
        except duckdb.IOException as e:
            if "Could not set lock" in str(e):
                raise DatabaseBusyError(
                    f"database {self.path} is in use by another process; try again later ({e})"
                ) from e
            raise StoreError(f"cannot open database {self.path}: {e}") from e
        except duckdb.Error as e:
            raise StoreError(f"cannot open database {self.path}: {e}") from e
        if read_only:
            self._check_schema()
        else:
            self._migrate()
            if self.path != ":memory:":
                from faultlens.ingest import publish  # readers wait for this writer's publish

                publish.on_open(self)

    # -- lifecycle -------------------------------------------------------------------------------
    def close(self) -> None:
        try:
            if not self.read_only and self.path != ":memory:":
                from faultlens.ingest import publish  # readers' view, when they asked for one

                publish.on_close(self)
        finally:
            self.con.close()

    def _run(self, sql: str, params: Sequence[Any] | None = None) -> None:
        """Execute a statement to its end (DuckDB 2 keeps an execute() result open otherwise)."""
        self.con.execute(sql, list(params) if params else [])
        self.con.complete()

    def _fetchall(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        return self.con.execute(sql, list(params) if params else []).fetchall()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_schema(self) -> None:
        """A reader of a file with no faultlens tables gets told so, not a catalog error."""
        try:
            rows = self._fetchall(
                "SELECT count(*) FROM information_schema.tables WHERE table_name = 'events'"
            )
        except duckdb.Error as e:
            raise StoreError(f"cannot read the schema of {self.path}: {e}") from e
        if not rows or rows[0][0] == 0:
            raise EmptyDatabaseError(
                f"{self.path} holds no faultlens tables (not a faultlens database, or the first "
                "ingest into it was stopped before it created them): run `faultlens ingest`"
            )

    def _migrate(self) -> None:
        # One transaction: a process killed while creating the schema leaves all of it or none.
        try:
            with self.transaction():
                self._migrate_statements()
        except duckdb.Error as e:
            raise StoreError(f"cannot create or migrate the schema in {self.path}: {e}") from e

    def _migrate_statements(self) -> None:
        self._run("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER)")
        rows = self._fetchall("SELECT max(version) FROM schema_version")
        current = rows[0][0] if rows and rows[0][0] is not None else 0
        for table in TABLES.values():
            self._run(table.ddl())
        for version in range(max(current, 1) + 1, SCHEMA_VERSION + 1):
            for stmt in MIGRATIONS.get(version, []):
                self._run(stmt)
        for name in VIEWS:
            self._run(view_ddl(name))
        if current < SCHEMA_VERSION:
            self._run("DELETE FROM schema_version")
            self._run("INSERT INTO schema_version VALUES (?)", [SCHEMA_VERSION])

    # -- transactions ----------------------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[Store]:
        """All writes inside happen, or none do (also on KeyboardInterrupt)."""
        try:
            self._run("BEGIN TRANSACTION")
        except duckdb.Error as e:
            raise StoreError(f"cannot begin a transaction: {e}") from e
        try:
            yield self
        except BaseException:
            try:
                self._run("ROLLBACK")
            except duckdb.Error:
                log.exception("rollback failed")
            raise
        try:
            self._run("COMMIT")
        except duckdb.Error as e:
            raise StoreError(f"commit failed: {e}") from e

    @contextmanager
    def lowered_memory(self, limit: str) -> Iterator[Store]:
        """DuckDB's ``memory_limit`` at ``limit`` inside (never raised above the store's own),
        then back to the store's."""
        mine, lower = memory_bytes(self.memory_limit, self.con), memory_bytes(limit, self.con)
        if mine is None or lower is None or lower >= mine:
            yield self
            return
        self._run(f"SET memory_limit = '{limit}'")
        try:
            yield self
        finally:
            self._run(f"SET memory_limit = '{self.memory_limit}'")

    # -- generic access --------------------------------------------------------------------------
    def execute(self, sql: str, params: Sequence[Any] | None = None) -> None:
        try:
            self._run(sql, params)
        except duckdb.Error as e:
            raise StoreError(f"query failed: {e}") from e

    def query(self, sql: str, params: Sequence[Any] | None = None) -> pl.DataFrame:
        """Run a SELECT and return a polars frame."""
        try:
            rel = self.con.sql(sql, params=list(params) if params else None)
            if rel is None:
                raise StoreError("query() is for statements that return rows; use execute()")
            return rel.pl()
        except duckdb.Error as e:
            raise StoreError(f"query failed: {e}") from e

    def records(self, sql: str, params: Sequence[Any] | None = None) -> list[dict[str, Any]]:
        """Run a SELECT and return its rows as dicts (no Arrow, no polars: for small answers)."""
        try:
            cur = self.con.execute(sql, list(params) if params else [])
            names = [d[0] for d in cur.description or []]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
        except duckdb.Error as e:
            raise StoreError(f"query failed: {e}") from e

    def scalar(self, sql: str, params: Sequence[Any] | None = None) -> Any:
        try:
            rows = self._fetchall(sql, params)
        except duckdb.Error as e:
            raise StoreError(f"query failed: {e}") from e
        return rows[0][0] if rows else None

    def insert(self, table: str, frame: pl.DataFrame) -> int:
        """Append ``frame`` (conformed to the declared schema) to ``table``; rows written."""
        if table not in TABLES:
            raise StoreError(f"unknown table {table!r}")
        if frame.height == 0:
            return 0
        frame = conform(table, frame)
        try:
            self.con.register("_faultlens_insert", frame.to_arrow())
            self._run(f"INSERT INTO {table} BY NAME SELECT * FROM _faultlens_insert")
        except duckdb.Error as e:
            raise StoreError(f"insert into {table} failed: {e}") from e
        finally:
            try:
                self.con.unregister("_faultlens_insert")
            except duckdb.Error:
                pass
        return frame.height

    def insert_parquet(self, table: str, files: Sequence[str]) -> int:
        """Append Parquet parts (written from conformed frames) to ``table``."""
        if table not in TABLES:
            raise StoreError(f"unknown table {table!r}")
        if not files:
            return 0
        try:
            rows = self._fetchall(
                # the parts' folders are hive-style (source=.../day=...): the columns are in
                # the files, so the folder names must not add any
                f"INSERT INTO {table} BY NAME SELECT * FROM read_parquet(?, hive_partitioning = "
                "false)",
                [list(files)],
            )
            return int(rows[0][0]) if rows else 0
        except duckdb.Error as e:
            raise StoreError(f"loading {table} failed: {e}") from e

    def insert_quarantine_parquet(self, file: str, files: Sequence[str]) -> None:
        try:
            self._run(
                "INSERT INTO quarantine BY NAME SELECT ? AS file, line, raw, reason "
                "FROM read_parquet(?, hive_partitioning = false)",
                [file, list(files)],
            )
        except duckdb.Error as e:
            raise StoreError(f"loading quarantine failed: {e}") from e

    def count(self, table: str) -> int:
        if table not in TABLES:
            raise StoreError(f"unknown table {table!r}")
        return int(self.scalar(f"SELECT count(*) FROM {table}"))

    # -- the ingested-files registry --------------------------------------------------------------
    def files_matching(self, path: str, fingerprint: str) -> pl.DataFrame:
        """Registry rows for this path or this content fingerprint, newest first."""
        return self.query(
            "SELECT * FROM ingested_files WHERE path = ? OR fingerprint = ? "
            "ORDER BY ingested_at DESC NULLS LAST, bytes DESC",
            [path, fingerprint],
        )

    def record_file(self, row: dict[str, Any]) -> None:
        """Upsert the registry row of one file incarnation (keyed by path and head fingerprint)."""
        self.execute(
            "DELETE FROM ingested_files WHERE path = ? AND fingerprint = ? AND head_len = ?",
            [row["path"], row["fingerprint"], row["head_len"]],
        )
        self.insert("ingested_files", pl.DataFrame([row]))

    def forget_file(self, path: str) -> None:
        """Delete every row parsed from ``path`` and its registry rows (for ``--reparse``; call
        inside the transaction that loads it again). Telemetry samples are not keyed by file and
        stay as they are."""
        for table in TABLES.values():  # telemetry keeps no file column: it is not replaced
            if table.name in ("ingested_files", "event_summary"):
                continue
            if "file" in {c.name for c in table.columns}:
                self.execute(f"DELETE FROM {table.name} WHERE file = ?", [path])
        self.execute("DELETE FROM event_summary WHERE tbl = 'events' AND file = ?", [path])
        self.execute("DELETE FROM ingested_files WHERE path = ?", [path])

    def nodes_from_rank_map(self, file: str, *, table: str = "events") -> int:
        """Give ``file``'s node-less events that name a rank the host of that rank in the NCCL
        rank map of the same job (or, without a job id, of the same file), with ``node_source =
        'rank_map'``; ranks mapped to more than one host are left alone. Returns how many.
        ``table`` is ``events`` or the stage of a file's new events."""
        rank = "TRY_CAST(json_extract_string(e.attrs, '$.rank') AS INTEGER)"
        where = f"e.file = ? AND e.node IS NULL AND {rank} IS NOT NULL"
        if not self.scalar(f"SELECT count(*) FROM {table} e WHERE {where}", [file]):
            return 0
        before = self.scalar(
            f"SELECT count(*) FROM {table} WHERE file = ? AND node_source = 'rank_map'", [file]
        )
        self.execute(
            f"UPDATE {table} e SET node = m.node, node_source = 'rank_map' FROM ("
            "  SELECT coalesce(job_id, 'file:' || file) AS k, rank, any_value(node) AS node"
            "  FROM nccl_ranks WHERE node IS NOT NULL AND rank IS NOT NULL"
            f"  AND coalesce(job_id, 'file:' || file) IN (SELECT DISTINCT coalesce(job_id, "
            f"'file:' || file) FROM {table} WHERE file = ? AND node IS NULL) GROUP BY ALL"
            "  HAVING count(DISTINCT node) = 1"
            f") m WHERE {where} AND m.k = coalesce(e.job_id, 'file:' || e.file) "
            f"AND m.rank = {rank}",
            [file, file],
        )
        after = self.scalar(
            f"SELECT count(*) FROM {table} WHERE file = ? AND node_source = 'rank_map'", [file]
        )
        return int(after or 0) - int(before or 0)

    def resolve_boot_relative(
        self, file: str, boot_time: datetime, *, table: str = "events"
    ) -> int:
        """Turn the boot-relative stamps of ``file``'s events into wall-clock time."""
        n = self.scalar(
            f"SELECT count(*) FROM {table} WHERE file = ? AND ts IS NULL AND uptime_s IS NOT NULL",
            [file],
        )
        if not n:
            return 0
        self.execute(
            f"UPDATE {table} SET "
            "ts = ?::TIMESTAMP + to_microseconds(CAST(uptime_s * 1e6 AS BIGINT)), "
            "ts_flag = 'boot_relative_resolved' "
            "WHERE file = ? AND ts IS NULL AND uptime_s IS NOT NULL",
            [boot_time, file],
        )
        return int(n)

    # -- a file's new events and the summary of what each file gave -------------------------------
    def load_file_events(
        self, file: str, parts: Sequence[str], *, boot_time: datetime | None
    ) -> int:
        """Append a file's new events (Parquet parts) to ``events``: their boot-relative stamps
        resolved with ``boot_time``, node-less ones placed from the NCCL rank map, and their
        counts added to ``event_summary``. Touches only the new rows (none of ``events``)."""
        if not parts:
            return 0
        try:
            self._run(
                f"CREATE OR REPLACE TEMP TABLE {_STAGE} AS SELECT * FROM "
                "read_parquet(?, hive_partitioning = false)",
                [list(parts)],
            )
        except duckdb.Error as e:
            raise StoreError(f"loading events failed: {e}") from e
        try:
            if boot_time is not None:
                self.resolve_boot_relative(file, boot_time, table=_STAGE)
            self.nodes_from_rank_map(file, table=_STAGE)
            self.execute(f"INSERT INTO events BY NAME SELECT * FROM {_STAGE}")
            n = int(self.scalar(f"SELECT count(*) FROM {_STAGE}") or 0)
            self.add_summary(
                "events",
                file,
                "SELECT file, source, kind, node, count(*) AS n, count(*) FILTER (WHERE ts IS "
                f"NULL) AS no_ts, max(ts) AS last_ts FROM {_STAGE} GROUP BY ALL",
            )
        finally:
            self.execute(f"DROP TABLE IF EXISTS {_STAGE}")
        return n

    def add_summary(
        self, tbl: str, file: str | None, select_sql: str, params: Sequence[Any] = ()
    ) -> None:
        """Merge rows (file, source, kind, node, n, no_ts, last_ts) of ``select_sql`` into the
        ``tbl`` part of ``event_summary`` for ``file``."""
        key = "tbl = ? AND file IS NOT DISTINCT FROM ?"
        self.execute(
            "CREATE OR REPLACE TEMP TABLE _faultlens_summary AS SELECT ? AS tbl, file, source, "
            "kind, node, sum(n)::BIGINT AS n, sum(no_ts)::BIGINT AS no_ts, max(last_ts) AS "
            f"last_ts FROM (SELECT file, source, kind, node, n, no_ts, last_ts FROM event_summary "
            f"WHERE {key} UNION ALL BY NAME {select_sql}) GROUP BY ALL",
            [tbl, tbl, file, *params],
        )
        self.execute(f"DELETE FROM event_summary WHERE {key}", [tbl, file])
        self.execute("INSERT INTO event_summary BY NAME SELECT * FROM _faultlens_summary")
        self.execute("DROP TABLE _faultlens_summary")

    def insert_summarized(self, table: str, frame: pl.DataFrame, file: str) -> int:
        """``insert`` of rows that ``event_summary`` counts (events, telemetry) written outside
        ``load()`` (the Prometheus pull), with their summary rows under ``file``."""
        n = self.insert(table, frame)
        if not n or table not in ("events", "telemetry"):
            return n
        if table == "events":
            cols = "file, source, kind, node"
        else:
            cols = (
                f"?::VARCHAR AS file, '{TELEMETRY_SOURCE}' AS source, NULL::VARCHAR AS kind, node"
            )
        rows = conform(table, frame).select(
            "ts", "node", *(["file", "source", "kind"] if table == "events" else [])
        )
        try:
            self.con.register("_faultlens_summarize", rows.to_arrow())
            self.add_summary(
                table,
                file,
                f"SELECT {cols}, count(*) AS n, count(*) FILTER (WHERE ts IS NULL) AS no_ts, "
                "max(ts) AS last_ts FROM _faultlens_summarize GROUP BY ALL",
                [] if table == "events" else [file],
            )
        finally:
            self.con.unregister("_faultlens_summarize")
        return n

    # -- the Prometheus pull's high-water marks -------------------------------------------------
    def prom_mark(self, url: str, metric: str) -> tuple[datetime, int] | None:
        """(end of the last pulled window, samples so far) of ``metric`` from ``url``."""
        rows = self._fetchall(
            "SELECT until, samples FROM prom_marks WHERE url = ? AND metric = ?", [url, metric]
        )
        return (rows[0][0], int(rows[0][1])) if rows else None

    def record_prom_mark(
        self, url: str, metric: str, until: datetime, samples: int, pulled_at: datetime
    ) -> None:
        self.execute("DELETE FROM prom_marks WHERE url = ? AND metric = ?", [url, metric])
        self.execute(
            "INSERT INTO prom_marks VALUES (?, ?, ?, ?, ?)",
            [url, metric, until, samples, pulled_at],
        )

    def resummarize_file(self, file: str) -> None:
        """Recount ``file``'s events from ``events`` (after an update of its older rows)."""
        self.execute("DELETE FROM event_summary WHERE tbl = 'events' AND file = ?", [file])
        self.add_summary(
            "events",
            file,
            "SELECT file, source, kind, node, count(*) AS n, count(*) FILTER (WHERE ts IS NULL) "
            "AS no_ts, max(ts) AS last_ts FROM events WHERE file = ? GROUP BY ALL",
            [file],
        )

    def file_summary(self, file: str) -> tuple[int, int]:
        """(events without a time, events without a node) of ``file``, from the summary."""
        row = self._fetchall(
            "SELECT coalesce(sum(no_ts), 0)::BIGINT, coalesce(sum(n) FILTER (WHERE node IS "
            "NULL), 0)::BIGINT FROM event_summary WHERE tbl = 'events' AND file = ?",
            [file],
        )[0]
        return int(row[0]), int(row[1])

    def summary_source(self) -> str:
        """``event_summary``, or the same rows computed from the tables on a database made before
        it (opened read-only, so not migrated) or attached to a lake exported without it."""
        if self.has_table("event_summary") and (
            self.scalar("SELECT count(*) FROM event_summary")
            or not self.scalar(
                "SELECT count(*) FROM ((SELECT 1 FROM events LIMIT 1) "
                "UNION ALL (SELECT 1 FROM telemetry LIMIT 1))"
            )
        ):
            return "event_summary"
        return SUMMARY_FROM_TABLES

    def has_table(self, name: str) -> bool:
        return bool(
            self.scalar(
                "SELECT count(*) FROM information_schema.tables WHERE table_name = ? "
                "AND table_schema = current_schema()",
                [name],
            )
        )

    def record_dataset(self, file: str, dataset: str | None) -> None:
        """File ``file`` belongs to ``dataset`` (``None``: the site's own history)."""
        self.execute("DELETE FROM dataset_files WHERE file = ?", [file])
        if dataset:
            self.execute("INSERT INTO dataset_files VALUES (?, ?)", [dataset, file])

    def load_xid_catalog(self, frame: pl.DataFrame) -> None:
        with self.transaction():
            self.execute("DELETE FROM xid_catalog")
            self.insert("xid_catalog", frame)

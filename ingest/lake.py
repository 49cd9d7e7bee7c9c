"""Parquet-lake mode: the parsed tables as a folder of Parquet files, and a database of views on it.

``export_lake(store, folder)`` writes every table of parsed rows as hive-partitioned Parquet
(``events/source=kernel/day=2026-01-03/data_0.parquet``): by ``source`` where the table has one,
and by the UTC day of its time column. The small tables (registry, catalog, quarantine, ...) are
written whole. ``attach_lake(store, folder_or_url)`` turns the tables of a (fresh) database into
views over ``read_parquet(..., hive_partitioning = true)``, so every query of faultlens runs on
history too big to load. ``s3://``, ``gs://``, ``r2://`` and ``https://`` locations go through
DuckDB's ``httpfs`` extension (credentials: DuckDB secrets / the usual AWS environment).

Lake tables are read-only: ingest into an ordinary database and export from it.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from faultlens.ingest.errors import ConfigError, StoreError
from faultlens.ingest.schema import SCHEMA_VERSION, TABLES, lake_view_ddl
from faultlens.ingest.store import Store

log = logging.getLogger(__name__)

# Table -> the time column whose UTC day partitions it. Tables not named here are written whole.
DAY_COLUMN: dict[str, str] = {
    "events": "ts",
    "jobs": "submit",
    "job_steps": "start",
    "telemetry": "ts",
    "gpus": "last_seen",
    "nccl_ranks": "ts",
    "link_health": "ts",
    "train_steps": "ts",
}
# Parsed tables become views over the lake; the small ones (registry, catalog, predictions, ...)
# are copied into the database, so that they stay writable.
VIEW_TABLES = (*DAY_COLUMN, "quarantine")
MANIFEST = "_faultlens_lake.json"
_REMOTE = (
    "s3://",
    "s3a://",
    "gs://",
    "gcs://",
    "r2://",
    "az://",
    "abfss://",
    "http://",
    "https://",
)


@dataclass(frozen=True)
class LakeTable:
    name: str
    rows: int
    partition_by: tuple[str, ...]


def partition_columns(table: str) -> tuple[str, ...]:
    """The hive partition keys of ``table``: (``source``,) ``day``, or none."""
    if table not in DAY_COLUMN:
        return ()
    has_source = any(c.name == "source" for c in TABLES[table].columns)
    return ("source", "day") if has_source else ("day",)


def _lit(text: str) -> str:
    """A SQL string literal (COPY targets and view definitions cannot take parameters)."""
    if "\x00" in text:
        raise ConfigError("a lake location cannot contain NUL characters")
    return "'" + text.replace("'", "''") + "'"


def is_remote(location: str) -> bool:
    return location.lower().startswith(_REMOTE)


def _join(location: str, *parts: str) -> str:
    return "/".join([location.rstrip("/"), *parts])


def _load_httpfs(store: Store) -> None:
    try:
        store.execute("LOAD httpfs")
    except StoreError:
        store.execute("INSTALL httpfs")
        store.execute("LOAD httpfs")


def export_lake(store: Store, location: str | Path, *, tables: list[str] | None = None) -> dict:
    """Write the tables of ``store`` under ``location`` (replacing what a previous export wrote
    for the same tables); returns the manifest (rows and partition keys per table)."""
    loc = str(location)
    if is_remote(loc):
        _load_httpfs(store)
    else:
        Path(loc).mkdir(parents=True, exist_ok=True)
    written: dict[str, LakeTable] = {}
    for name in tables or list(TABLES):
        if name not in TABLES:
            raise ConfigError(f"unknown table {name!r}")
        n = store.count(name)
        keys = partition_columns(name)
        target = _join(loc, name)
        if keys:
            day = f'CAST("{DAY_COLUMN[name]}" AS DATE) AS day'
            sql = (
                f"COPY (SELECT *, {day} FROM {name}) TO {_lit(target)} "
                f"(FORMAT parquet, COMPRESSION zstd, PARTITION_BY ({', '.join(keys)}), "
                "OVERWRITE_OR_IGNORE, FILENAME_PATTERN 'data_{i}')"
            )
        else:
            if not is_remote(loc):
                Path(target).mkdir(parents=True, exist_ok=True)
            sql = (
                f"COPY (SELECT * FROM {name}) TO {_lit(_join(target, 'data_0.parquet'))} "
                "(FORMAT parquet, COMPRESSION zstd)"
            )
        if keys and not is_remote(loc):
            _clear_local(Path(target))
        if n or not keys:
            store.execute(sql)
        written[name] = LakeTable(name, n, keys)
        log.info("exported %s: %d rows", name, n)
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "tables": {
            t.name: {"rows": t.rows, "partition_by": list(t.partition_by)} for t in written.values()
        },
    }
    if not is_remote(loc):
        old = read_manifest(loc) or {"tables": {}}
        manifest["tables"] = {**old.get("tables", {}), **manifest["tables"]}
        (Path(loc) / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def _clear_local(folder: Path) -> None:
    """Remove the Parquet files of a previous export of one table (and only those)."""
    if folder.is_dir():
        for f in folder.rglob("*.parquet"):
            f.unlink()


def read_manifest(location: str | Path) -> dict | None:
    path = Path(str(location)) / MANIFEST
    if is_remote(str(location)) or not path.is_file():
        return None
    return json.loads(path.read_text())


def _files_of(store: Store, location: str, table: str) -> str | None:
    """The glob of ``table``'s Parquet files under ``location``, if there are any."""
    pattern = _join(location, table, "**", "*.parquet")
    n = store.scalar("SELECT count(*) FROM glob(?)", [pattern])
    return pattern if n else None


def attach_lake(
    target: Store | str | Path, location: str | Path, *, tables: list[str] | None = None
) -> dict[str, str]:
    """Serve the parsed tables of ``target`` (a Store, or a database path) from the lake at
    ``location`` as views, and copy the lake's small tables into it; returns table -> "view" or
    "loaded". A table that already holds rows of its own is left alone for the small tables and
    refused for the parsed ones (attach a lake to a fresh database)."""
    if not isinstance(target, Store):
        with Store(target) as store:
            return attach_lake(store, location, tables=tables)
    store, loc = target, str(location)
    if is_remote(loc):
        _load_httpfs(store)
    else:
        loc = str(Path(loc).resolve())  # the views must not depend on the working directory
    if not is_remote(loc) and not Path(loc).is_dir():
        raise ConfigError(f"no lake at {loc}: run `faultlens lake export {loc}` first")
    done: dict[str, str] = {}
    for name in tables or list(TABLES):
        pattern = _files_of(store, loc, name)
        if pattern is None:
            continue
        kind = store.scalar(
            "SELECT table_type FROM information_schema.tables "
            "WHERE table_name = ? AND table_schema = current_schema()",
            [name],
        )
        has_rows = kind == "BASE TABLE" and store.count(name) > 0
        if name not in VIEW_TABLES:
            if not has_rows:
                with store.transaction():
                    store.execute(f"INSERT INTO {name} BY NAME {_view_sql(store, name, pattern)}")
                done[name] = "loaded"
            continue
        if has_rows:
            raise ConfigError(
                f"table {name} of {store.path} holds rows; attach a lake to a fresh database"
            )
        if kind == "BASE TABLE":
            store.execute(f"DROP TABLE {name}")
        store.execute(lake_view_ddl(name, _view_sql(store, name, pattern)))
        done[name] = "view"
    log.info("attached %s from %s", ", ".join(done), loc)
    return done


def _view_sql(store: Store, name: str, pattern: str) -> str:
    hive = "true" if partition_columns(name) else "false"
    source = f"read_parquet({_lit(pattern)}, hive_partitioning = {hive}, union_by_name = true)"
    present = set(store.query(f"DESCRIBE SELECT * FROM {source}")["column_name"].to_list())
    cols = []
    for c in TABLES[name].columns:
        expr = f'"{c.name}"' if c.name in present else "NULL"
        cols.append(f'CAST({expr} AS {c.sql}) AS "{c.name}"')
    return f"SELECT {', '.join(cols)} FROM {source}"

"""Comparing two faultlens databases table by table (order-insensitive, run-time columns aside)."""

from __future__ import annotations

from pathlib import Path

from faultlens.ingest.schema import TABLES
from faultlens.ingest.store import Store

# Columns that record when something ran, not what the logs said.
RUN_TIME_COLUMNS = {"ingested_files": ("ingested_at",)}


def table_diff(a: Path | str, b: Path | str, tables: list[str] | None = None) -> dict[str, str]:
    """Tables whose contents differ between databases ``a`` and ``b``: name -> what differs."""
    diffs: dict[str, str] = {}
    with Store(a, read_only=True) as store:
        store.execute(f"ATTACH '{b}' AS other (READ_ONLY)")
        for name in tables or list(TABLES):
            drop = RUN_TIME_COLUMNS.get(name, ())
            cols = ", ".join(f'"{c.name}"' for c in TABLES[name].columns if c.name not in drop)
            na = store.scalar(f"SELECT count(*) FROM {name}")
            nb = store.scalar(f"SELECT count(*) FROM other.{name}")
            only_a = store.scalar(
                f"SELECT count(*) FROM (SELECT {cols} FROM {name} "
                f"EXCEPT ALL SELECT {cols} FROM other.{name})"
            )
            only_b = store.scalar(
                f"SELECT count(*) FROM (SELECT {cols} FROM other.{name} "
                f"EXCEPT ALL SELECT {cols} FROM {name})"
            )
            if na != nb or only_a or only_b:
                diffs[name] = f"{na} vs {nb} rows; {only_a} only in a, {only_b} only in b"
    return diffs

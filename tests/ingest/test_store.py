"""The store: schema creation and migration, transactions, parameterized inserts."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import duckdb
import polars as pl
import pytest

from faultlens.ingest import store as store_module
from faultlens.ingest.errors import StoreError
from faultlens.ingest.schema import SCHEMA_VERSION, TABLES
from faultlens.ingest.store import EmptyDatabaseError, Store


def test_open_creates_every_declared_table_with_declared_columns(db_path: Path) -> None:
    with Store(db_path) as store:
        for name, table in TABLES.items():
            cols = store.query(
                "SELECT column_name FROM information_schema.columns WHERE table_name = ? "
                "ORDER BY ordinal_position",
                [name],
            )["column_name"].to_list()
            assert cols == [c.name for c in table.columns]
        assert store.scalar("SELECT max(version) FROM schema_version") == SCHEMA_VERSION


def test_reopen_keeps_rows_and_version(db_path: Path) -> None:
    with Store(db_path) as store:
        store.insert(
            "quarantine", pl.DataFrame({"file": ["f"], "line": [3], "raw": ["x"], "reason": ["r"]})
        )
    with Store(db_path) as store:
        assert store.count("quarantine") == 1
        assert store.scalar("SELECT count(*) FROM schema_version") == 1


def test_transaction_rolls_back_on_error(store: Store) -> None:
    row = pl.DataFrame({"file": ["f"], "line": [1], "raw": ["x"], "reason": ["r"]})
    with pytest.raises(RuntimeError), store.transaction():
        store.insert("quarantine", row)
        raise RuntimeError("boom")
    assert store.count("quarantine") == 0
    with store.transaction():
        store.insert("quarantine", row)
    assert store.count("quarantine") == 1


def test_insert_conforms_types_and_fills_missing_columns(store: Store) -> None:
    store.insert(
        "events",
        pl.DataFrame(
            {"ts": [datetime(2025, 1, 2, 3, 4, 5)], "code": ["79"], "kind": ["xid"], "line": [7]}
        ),
    )
    got = store.query("SELECT ts, code, kind, node, line FROM events").row(0)
    assert got == (datetime(2025, 1, 2, 3, 4, 5), 79, "xid", None, 7)


def test_unknown_column_is_rejected(store: Store) -> None:
    with pytest.raises(ValueError, match="not in table events"):
        store.insert("events", pl.DataFrame({"bogus": [1]}))


def test_read_only_missing_db_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no database at"):
        Store(tmp_path / "absent.duckdb", read_only=True)


def test_reader_of_a_file_without_tables_is_told_so(tmp_path: Path) -> None:
    path = tmp_path / "bare.duckdb"
    duckdb.connect(str(path)).close()  # a DuckDB file, no faultlens tables
    with pytest.raises(EmptyDatabaseError, match="holds no faultlens tables"):
        Store(path, read_only=True)


def test_schema_creation_is_all_or_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "half.duckdb"
    broken = dict(TABLES)
    last = list(broken)[-1]

    class Broken:
        def ddl(self) -> str:
            return "CREATE TABLE this is not sql"

    broken[last] = Broken()  # type: ignore[assignment]
    monkeypatch.setattr(store_module, "TABLES", broken)
    with pytest.raises(StoreError, match="cannot create or migrate the schema"):
        Store(path)
    con = duckdb.connect(str(path))
    tables = con.execute("SELECT table_name FROM information_schema.tables").fetchall()
    con.close()
    assert tables == []  # the tables before the broken one were rolled back with it
    monkeypatch.undo()
    with Store(path) as store:  # and the next open creates all of it
        assert store.count("events") == 0


def test_read_only_store_cannot_write(db_path: Path) -> None:
    Store(db_path).close()
    with Store(db_path, read_only=True) as ro:
        with pytest.raises(StoreError):
            ro.execute("DELETE FROM events")


def test_parameters_are_values_not_sql(store: Store) -> None:
    hostile = "x'); DROP TABLE events; --"
    store.insert(
        "quarantine",
        pl.DataFrame({"file": [hostile], "line": [1], "raw": [hostile], "reason": ["r"]}),
    )
    assert store.query("SELECT file FROM quarantine WHERE file = ?", [hostile]).height == 1
    assert store.count("events") == 0


def test_old_database_is_migrated(db_path: Path) -> None:
    con = duckdb.connect(str(db_path))
    con.execute("CREATE TABLE schema_version (version INTEGER)")
    con.execute("INSERT INTO schema_version VALUES (0)")
    con.close()
    with Store(db_path) as store:
        assert store.scalar("SELECT max(version) FROM schema_version") == SCHEMA_VERSION
        assert store.count("events") == 0


def _limit(store: Store) -> int:
    """DuckDB's memory limit in bytes, to 0.1% (it writes it back as e.g. ``953.6 MiB``)."""
    from faultlens.ingest.store import memory_bytes

    shown = memory_bytes(str(store.scalar("SELECT current_setting('memory_limit')")))
    assert shown is not None
    return round(shown, -6)  # megabytes: the shown value is rounded to a tenth of a MiB


def test_memory_sizes_read_as_duckdb_reads_them() -> None:
    from faultlens.ingest.store import memory_bytes

    assert memory_bytes("1GB") == 1_000_000_000
    assert memory_bytes("512 MB") == 512_000_000
    assert memory_bytes("2GiB") == 2 * 1024**3
    assert memory_bytes("80%") is None  # not a size: the limit is left alone


def test_a_file_is_loaded_under_the_lower_limit_then_the_stores_own_comes_back(
    db_path: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``pipeline.load`` runs under ``LOAD_MEMORY`` (DuckDB's buffers sit on top of the parser's
    peak); a store opened with a lower limit keeps it; an error inside restores the limit."""
    from faultlens.ingest import pipeline
    from faultlens.ingest.store import LOAD_MEMORY

    seen: list[str] = []
    real = Store.load_file_events

    def spy(self: Store, *args: object, **kwargs: object) -> int:
        seen.append(_limit(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Store, "load_file_events", spy)
    log = tmp_path / "kern.log"
    log.write_text(
        "Mar  1 10:00:00 gpu001 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen "
        "off the bus.\n"
    )
    with Store(db_path) as store:
        before = _limit(store)
        assert before == 1_000_000_000  # the store's 1GB
        (report,) = pipeline.ingest_paths(store, [str(log)], now=datetime(2025, 3, 2)).files
        assert report.status == "ok" and store.count("events") == 1
        assert seen == [512_000_000]  # 512MB while the events' parts were appended
        assert _limit(store) == before
        with pytest.raises(RuntimeError), store.lowered_memory(LOAD_MEMORY):
            raise RuntimeError("a load that fails")
        assert _limit(store) == before
    with Store(db_path, memory_limit="256MB") as low, low.lowered_memory(LOAD_MEMORY):
        assert _limit(low) == 256_000_000  # never raised above the store's own

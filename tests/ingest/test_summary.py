"""``event_summary``: kept by ``load()`` from each file's new rows, it must always equal the same
aggregate computed from ``events`` and ``telemetry`` themselves (real corpus files, a grown log
whose older rows get a time later, a re-parse); ``status`` built from it equals ``status`` built
from the tables. And the schema module declares every table and view of a database."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import polars as pl

from faultlens.app.cmd_ingest import status_doc
from faultlens.ingest.base import ParseContext
from faultlens.ingest.pipeline import ingest_paths
from faultlens.ingest.schema import SCHEMA_VERSION, TABLES, declared_names
from faultlens.ingest.store import SUMMARY_FROM_TABLES, Store
from faultlens.models.freshness import source_last_seen, source_last_seen_full

NOW = datetime(2026, 1, 1)
BOOT = datetime(2025, 2, 14, 5, 0, 0)
XID = "[{s:>12.6f}] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off.\n"


def _kept(store: Store) -> list[tuple]:
    return store.query(
        "SELECT tbl, file, source, kind, node, n, no_ts, last_ts FROM event_summary "
        "WHERE tbl = 'events' ORDER BY ALL"
    ).rows()


def _computed(store: Store) -> list[tuple]:
    return store.query(
        f"SELECT tbl, file, source, kind, node, n, no_ts, last_ts FROM {SUMMARY_FROM_TABLES} "
        "WHERE tbl = 'events' ORDER BY ALL"
    ).rows()


def _telemetry(store: Store, src: str) -> list[tuple]:  # samples are not keyed by file
    return store.query(
        f"SELECT node, sum(n)::BIGINT, sum(no_ts)::BIGINT, max(last_ts) FROM {src} "
        "WHERE tbl = 'telemetry' GROUP BY node ORDER BY node"
    ).rows()


def _ingest(store: Store, paths: list[Path], **ctx: object):
    base = ParseContext(file="", **ctx) if ctx else None
    return ingest_paths(store, [str(p) for p in paths], now=NOW, base_ctx=base)


def test_summary_equals_the_tables_after_real_files(corpus: Path, store: Store) -> None:
    files = [
        *sorted((corpus / "xid").iterdir())[:8],
        *sorted((corpus / "nccl").glob("*.log"))[:8],
        corpus / "telemetry" / "dcgm-exporter-issue250-prometheus-v100.prom",
        corpus / "slurm" / "slurmctld-elasticluster-pr504-state-file-errors.log",
    ]
    report = _ingest(store, files)
    assert any(f.rows.get("events") for f in report.files)
    assert store.count("telemetry") > 0
    assert _kept(store) == _computed(store)
    assert _telemetry(store, "event_summary") == _telemetry(store, SUMMARY_FROM_TABLES)
    # what ingest reported per file is the summary's count, and the tables' count
    for f in report.files:
        no_ts, no_node = store.scalar(
            "SELECT [count(*) FILTER (WHERE ts IS NULL), count(*) FILTER (WHERE node IS NULL)] "
            "FROM events WHERE file = ?",
            [f.path],
        )
        assert (f.events_no_ts, f.events_no_node) == (no_ts, no_node)
    assert status_doc(store) == status_doc(store, SUMMARY_FROM_TABLES)
    assert source_last_seen(store).equals(source_last_seen_full(store))


def test_grown_log_whose_older_rows_get_a_time_later(tmp_path: Path, store: Store) -> None:
    log = tmp_path / "dmesg.log"
    log.write_text(XID.format(s=100.5) + XID.format(s=200.25))
    first = _ingest(store, [log], node="gpu-01").files[0]
    assert first.events_no_ts == 2  # a dmesg stamp without a boot time: kept, counted
    with log.open("a") as f:
        f.write(XID.format(s=300.0))
    second = _ingest(store, [log], node="gpu-01", boot_time=BOOT).files[0]
    assert second.lines == 1
    assert second.events_no_ts == 0  # the older rows got their time with this part's boot time
    ts = store.query("SELECT ts FROM events ORDER BY line")["ts"].to_list()
    assert ts == [BOOT + timedelta(seconds=s) for s in (100.5, 200.25, 300.0)]
    assert _kept(store) == _computed(store)
    assert _kept(store)[0][5:] == (3, 0, BOOT + timedelta(seconds=300))


def test_grown_log_with_times_does_not_read_older_rows_again(tmp_path: Path, store: Store) -> None:
    log = tmp_path / "dmesg.log"
    log.write_text(XID.format(s=100.5))
    _ingest(store, [log], node="gpu-01", boot_time=BOOT)
    with log.open("a") as f:
        f.write(XID.format(s=300.0))
    # An older row changed behind the pipeline's back stays as it is: the second load counts
    # from its own rows and the file's prior counts, and never reads the older rows again.
    store.execute("UPDATE events SET node = 'moved' WHERE line = 1")
    _ingest(store, [log], node="gpu-01", boot_time=BOOT)
    kept = store.query("SELECT node, n FROM event_summary ORDER BY node").rows()
    assert kept == [("gpu-01", 2)]
    assert store.query("SELECT node FROM events ORDER BY line")["node"].to_list() == [
        "moved",
        "gpu-01",
    ]


def test_reparse_replaces_the_files_summary(tmp_path: Path, store: Store) -> None:
    log = tmp_path / "dmesg.log"
    log.write_text(XID.format(s=100.5) + XID.format(s=200.25))
    _ingest(store, [log], node="gpu-01")
    base = ParseContext(file="", node="gpu-02", boot_time=BOOT)
    ingest_paths(store, [str(log)], now=NOW, base_ctx=base, reparse=True)
    assert _kept(store) == _computed(store)
    assert [(r[4], r[5], r[6]) for r in _kept(store)] == [("gpu-02", 2, 0)]


def _names(store: Store) -> dict[str, str]:
    return dict(
        store.query(
            "SELECT table_name, table_type FROM information_schema.tables "
            "WHERE table_schema = current_schema()"
        ).rows()
    )


def test_every_table_and_view_of_a_database_is_declared(corpus: Path, tmp_path: Path) -> None:
    from faultlens.ingest.attribution import refresh

    with Store(tmp_path / "f.duckdb") as store:
        fresh = _names(store)
        assert set(fresh) == {*TABLES, "schema_version", "gpu_inventory"}
        assert {n for n, t in fresh.items() if t == "VIEW"} == {"gpu_inventory"}
        _ingest(store, [corpus / "xid" / "xid-gpud-pr46-xid13-xid109-dmesg-ctime.log"])
        refresh(store)
        used = _names(store)
    assert len(used) > len(fresh)  # the rollups came with the refresh
    assert set(used) <= declared_names(), set(used) - declared_names()


def test_schema_3_database_migrates_summary_and_pull_marks(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE schema_version (version INTEGER)")
    con.execute("INSERT INTO schema_version VALUES (3)")
    for name, table in TABLES.items():
        if name not in ("event_summary", "prom_marks"):
            con.execute(table.ddl())
    con.execute(
        "INSERT INTO events (ts, node, source, kind, file, line) VALUES "
        "('2025-01-01 00:00:00', 'a', 'kernel', 'xid', 'k.log', 1), "
        "(NULL, NULL, 'kernel', 'xid', 'k.log', 2)"
    )
    con.execute(
        "INSERT INTO telemetry (ts, node, gpu, metric, value) "
        "VALUES ('2025-01-02 00:00:00', 'a', 0, 'DCGM_FI_DEV_GPU_TEMP', 40)"
    )
    con.execute(
        "INSERT INTO ingested_files (path, fingerprint, head_len, bytes, lines, format, status, "
        "ingested_at) VALUES ('prometheus:http://p:9090#DCGM_FI_DEV_GPU_TEMP', 'x', 0, "
        "1735689600000, 7, 'prometheus_pull', 'ok', '2025-01-03 00:00:00'), "
        "('/var/log/k.log', 'y', 10, 10, 2, 'kernel', 'ok', '2025-01-03 00:00:00')"
    )
    con.close()
    with Store(path) as store:
        marks = store.query("SELECT * FROM prom_marks").rows()
        assert marks == [
            ("http://p:9090", "DCGM_FI_DEV_GPU_TEMP", datetime(2025, 1, 1), 7, datetime(2025, 1, 3))
        ]
        assert store.query("SELECT path FROM ingested_files").rows() == [("/var/log/k.log",)]
        assert _kept(store) == [  # DuckDB orders NULLs last
            ("events", "k.log", "kernel", "xid", "a", 1, 0, datetime(2025, 1, 1)),
            ("events", "k.log", "kernel", "xid", None, 1, 1, None),
        ]
        assert _telemetry(store, "event_summary") == [("a", 1, 0, datetime(2025, 1, 2))]
        assert store.scalar("SELECT max(version) FROM schema_version") == SCHEMA_VERSION


def test_status_of_an_unmigrated_database_read_only(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    for name, table in TABLES.items():
        if name != "event_summary":
            con.execute(table.ddl())
    con.execute(
        "INSERT INTO events (ts, node, source, kind, file, line) VALUES "
        "(NULL, 'a', 'kernel', 'xid', 'k.log', 1)"
    )
    con.close()
    with Store(path, read_only=True) as store:
        doc = status_doc(store)
    assert doc["events_by_kind"] == [{"source": "kernel", "kind": "xid", "n": 1}]
    assert doc["unplaced"] == {
        "no_ts": 1,
        "no_node": 0,
        "files": [{"file": "k.log", "no_ts": 1, "no_node": 0}],
    }


def test_pulled_telemetry_is_summarized(store: Store) -> None:
    frame = pl.DataFrame(
        {
            "ts": [datetime(2025, 1, 1), datetime(2025, 1, 2)],
            "node": ["a", "a"],
            "gpu": [0, 1],
            "metric": ["DCGM_FI_DEV_GPU_TEMP"] * 2,
            "value": [40.0, 41.0],
        }
    )
    assert store.insert_summarized("telemetry", frame, "prometheus:http://p") == 2
    assert store.insert_summarized("telemetry", frame.head(1), "prometheus:http://p") == 1
    assert _telemetry(store, "event_summary") == _telemetry(store, SUMMARY_FROM_TABLES)


def test_status_where_the_summary_is_empty_but_the_tables_are_not(store: Store) -> None:
    # a database attached to a lake exported before event_summary existed
    store.execute(
        "INSERT INTO events (ts, node, source, kind, file, line) VALUES "
        "('2025-01-01', NULL, 'kernel', 'xid', 'k.log', 1)"
    )
    assert store.summary_source() == SUMMARY_FROM_TABLES
    assert status_doc(store)["unplaced"]["no_node"] == 1

"""dcgm-exporter's MIG and Kubernetes labels (issue 12 item 6): each MIG instance of a GPU is its
own series (``GPU_I_ID`` / ``GPU_I_PROFILE``), and the workload's ``pod`` / ``namespace`` /
``container`` are kept, on the scrape's fast and reference paths and on the Prometheus range
export's whole and streamed reads; an older (version 5) database gains the columns."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import duckdb
import polars as pl
import pytest

from faultlens.ingest.base import ParseContext
from faultlens.ingest.lake import attach_lake, export_lake
from faultlens.ingest.pipeline import ingest_paths
from faultlens.ingest.schema import SCHEMA_VERSION
from faultlens.ingest.store import Store
from faultlens.ingest.telemetry.dcgm import DcgmExporterParser
from faultlens.ingest.telemetry.prom import PrometheusJsonParser

SCRAPE = Path(__file__).resolve().parents[2] / "data" / "telemetry" / "dcgm-mig-k8s.prom"
COLS = ("gpu", "gpu_instance", "gpu_profile", "pod", "namespace", "container", "metric", "value")
T1, T2 = datetime(2024, 7, 15), datetime(2024, 7, 15, 0, 0, 15)
ENGINE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
# (ts, gpu, instance, profile, pod, namespace, container, metric, value), as the file writes them
WANT = sorted(
    [
        (T1, 0, None, None, None, None, None, "DCGM_FI_DEV_GPU_TEMP", 38.0),
        (T1, 0, 1, "3g.40gb", "llm-train-0", "ml-team", "trainer", ENGINE, 0.81),
        (T1, 0, 2, "3g.40gb", "chat-7f9c", "serving", "infer", ENGINE, 0.12),
        (T1, 0, 13, "1g.10gb", None, None, None, ENGINE, 0.0),  # empty labels: no workload
        (T1, 1, None, None, "etl-5", "batch", "worker", "DCGM_FI_DEV_FB_USED", 1024.0),
        (T2, 0, None, None, None, None, None, "DCGM_FI_DEV_GPU_TEMP", 39.0),
        (T2, 0, 1, "3g.40gb", "llm-train-0", "ml-team", "trainer", ENGINE, 0.79),
        (T2, 0, 2, "3g.40gb", "chat-7f9c", "serving", "infer", ENGINE, 0.15),
        (T2, 0, 13, "1g.10gb", None, None, None, ENGINE, 0.0),
        (T2, 1, None, None, "etl-5", "batch", "worker", "DCGM_FI_DEV_FB_USED", 1025.0),
    ],
    key=str,
)


def _rows(frame: pl.DataFrame) -> list[tuple]:
    return sorted(frame.select("ts", *COLS).rows(), key=str)


def test_mig_instances_and_workloads_are_separate_series(store: Store) -> None:
    (f,) = ingest_paths(store, [str(SCRAPE)], now=datetime(2025, 6, 1)).files
    assert (f.status, f.format, f.parsed, f.quarantined) == ("ok", "dcgm_exporter", 10, 0)
    got = _rows(store.query("SELECT * FROM telemetry"))
    assert got == WANT
    # two instances of GPU 0 at one time are two samples, not one
    per = store.query(
        "SELECT count(*) AS n FROM telemetry WHERE metric = ? AND gpu = 0 GROUP BY ts", [ENGINE]
    )
    assert per["n"].to_list() == [3, 3]
    assert {r["node"] for r in store.query("SELECT node FROM telemetry").to_dicts()} == {"gpu-m01"}


def test_the_reference_path_gives_the_same_series() -> None:
    parser = DcgmExporterParser()
    ctx = ParseContext(file=str(SCRAPE), mtime=datetime(2025, 6, 1))
    ref = []
    for line in SCRAPE.read_text().splitlines():
        res = parser.parse_line(line, ctx)
        if res is not None:
            ref += [(r["ts"], *(r[c] for c in COLS)) for r in res.rows["telemetry"]]
    assert sorted(ref, key=str) == WANT
    fast = parser.parse_chunk(
        pl.Series(SCRAPE.read_text().splitlines()), 1, ctx, parser.new_state(ctx)
    )
    assert _rows(fast.tables["telemetry"]) == WANT


def _export(path: Path) -> None:
    """A range export from a Prometheus that scraped the exporter's pod: the plain pod /
    namespace labels name the exporter, the workload's are ``exported_*``."""
    result = []
    for gi, pod in (("1", "llm-train-0"), ("2", "chat-7f9c")):
        labels = {
            "__name__": ENGINE,
            "Hostname": "gpu-m02",
            "gpu": "0",
            "GPU_I_ID": gi,
            "GPU_I_PROFILE": "3g.40gb",
            "pod": "dcgm-exporter-x7k2p",
            "namespace": "gpu-operator",
            "exported_pod": pod,
            "exported_namespace": "ml-team",
            "exported_container": "main",
            "instance": "10.0.0.5:9400",
        }
        result.append({"metric": labels, "values": [[1721001600, "0.5"], [1721001615, gi]]})
    doc = {"status": "success", "data": {"resultType": "matrix", "result": result}}
    path.write_text(json.dumps(doc, separators=(",", ":")))


@pytest.mark.parametrize("streamed", [False, True])
def test_range_exports_keep_them_whole_and_streamed(
    streamed: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "range.json"
    _export(path)
    monkeypatch.setattr(PrometheusJsonParser, "stream_min_bytes", 0 if streamed else 1 << 62)
    with Store(tmp_path / "t.duckdb") as store:
        (f,) = ingest_paths(store, [str(path)], now=datetime(2025, 6, 1)).files
        assert (f.status, f.format) == ("ok", "prometheus_json")
        got = _rows(store.query("SELECT * FROM telemetry"))
    want = sorted(
        [
            (t, 0, gi, "3g.40gb", pod, "ml-team", "main", ENGINE, v)
            for gi, pod in ((1, "llm-train-0"), (2, "chat-7f9c"))
            for t, v in ((T1, 0.5), (T2, float(gi)))
        ],
        key=str,
    )
    assert got == want


def test_a_version_5_database_gains_the_columns(db_path: Path) -> None:
    new = ("gpu_instance", "gpu_profile", "pod", "namespace", "container")
    with Store(db_path):
        pass
    con = duckdb.connect(str(db_path))  # back to version 5: telemetry as it was, one row
    for col in new:
        con.execute(f"ALTER TABLE telemetry DROP COLUMN {col}")
    con.execute("UPDATE schema_version SET version = 5")
    con.execute("INSERT INTO telemetry VALUES (TIMESTAMP '2024-07-15', 'n1', 0, 'm', 1.5)")
    con.close()
    with Store(db_path) as store:
        assert store.scalar("SELECT max(version) FROM schema_version") == SCHEMA_VERSION >= 6
        row = store.query("SELECT * FROM telemetry").to_dicts()
        assert row == [
            {"ts": T1, "node": "n1", "gpu": 0, "metric": "m", "value": 1.5, **dict.fromkeys(new)}
        ]
        (f,) = ingest_paths(store, [str(SCRAPE)], now=datetime(2025, 6, 1)).files
        assert f.status == "ok"
        assert store.scalar("SELECT count(DISTINCT gpu_instance) FROM telemetry") == 3


def test_the_lake_keeps_them(store: Store, tmp_path: Path) -> None:
    ingest_paths(store, [str(SCRAPE)], now=datetime(2025, 6, 1))
    export_lake(store, tmp_path / "lake")
    with Store(tmp_path / "view.duckdb") as viewer:
        attach_lake(viewer, tmp_path / "lake")
        assert _rows(viewer.query("SELECT * FROM telemetry")) == WANT

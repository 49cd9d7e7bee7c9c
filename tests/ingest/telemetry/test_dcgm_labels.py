"""dcgm-exporter label spellings (issue 12 item 6): ``Hostname`` and ``hostname`` name the node,
on the vectorized path and on the reference (prometheus_client) path alike."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import polars as pl

from faultlens.ingest.base import ParseContext
from faultlens.ingest.pipeline import ingest_paths
from faultlens.ingest.store import Store
from faultlens.ingest.telemetry.dcgm import DcgmExporterParser

SCRAPE = Path(__file__).resolve().parents[2] / "data" / "telemetry" / "dcgm-hostname-variants.prom"
WANT = [(0, "gpu-e01", 41.0), (1, "gpu-e02", 43.0), (2, "gpu-e03", 45.0)]


def test_hostname_label_in_either_spelling(store: Store) -> None:
    (f,) = ingest_paths(store, [str(SCRAPE)], now=datetime(2025, 6, 1)).files
    assert (f.status, f.format, f.parsed, f.quarantined) == ("ok", "dcgm_exporter", 3, 0)
    rows = store.query("SELECT gpu, node, value FROM telemetry ORDER BY gpu").rows()
    assert rows == WANT


def test_the_reference_path_reads_the_same_nodes() -> None:
    parser = DcgmExporterParser()
    ctx = ParseContext(file=str(SCRAPE), mtime=datetime(2025, 6, 1))
    got = []
    for line in SCRAPE.read_text().splitlines():
        res = parser.parse_line(line, ctx)
        if res is not None:
            got += [(r["gpu"], r["node"], r["value"]) for r in res.rows["telemetry"]]
    assert got == WANT
    chunk = parser.parse_chunk(
        pl.Series(SCRAPE.read_text().splitlines()), 1, ctx, parser.new_state(ctx)
    )
    fast = chunk.tables["telemetry"].sort("gpu").select("gpu", "node", "value").rows()
    assert fast == WANT

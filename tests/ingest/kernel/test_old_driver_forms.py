"""Old drivers' NVRM forms (before ~2015): the GPU banner without ``PCI:`` is an inventory line
(noise), and ``NVRM: GPU at 0000:02:00.0 has fallen off the bus.`` is the fallen-off-the-bus event
(Xid 79's meaning) like the newer ``GPU 0000:41:00.0: GPU has fallen off the bus``."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import polars as pl

from faultlens.ingest.base import ParseContext, Parsed
from faultlens.ingest.kernel.parser import KernelParser
from faultlens.ingest.pipeline import ingest_paths
from faultlens.ingest.reader import iter_chunks
from faultlens.ingest.schema import conform, empty_frame

FIXTURE = Path(__file__).resolve().parents[2] / "data" / "kernel" / "dmesg-old-driver-forms.log"
# (line, kind, gpu) of the fixture's events
EXPECTED = [
    (2, "xid", "0000:02:00.0"),
    (3, "fallen_off_bus", "0000:02:00.0"),
    (4, "fallen_off_bus", "0000:41:00.0"),
]


def test_old_forms_accounted(store) -> None:
    report = ingest_paths(store, [str(FIXTURE)], now=datetime(2026, 3, 1))
    (f,) = report.files
    assert (f.lines, f.parsed, f.noise, f.quarantined) == (4, 3, 1, 0)
    assert store.query("SELECT line, kind, gpu FROM events ORDER BY line").rows() == EXPECTED


def test_old_forms_same_on_both_paths() -> None:
    parser = KernelParser()
    ctx = ParseContext(file=str(FIXTURE))
    state = parser.new_state(ctx)
    frames = [
        parser.parse_chunk(c.lines, c.first_line, ctx, state).tables.get("events")
        for c in iter_chunks(FIXTURE)
    ]
    frames.append(parser.finish(ctx, state).tables.get("events"))
    ev = pl.concat(
        [conform("events", f) for f in frames if f is not None] + [empty_frame("events")]
    )
    rows = ev.sort("line")
    assert rows.select("line", "kind", "gpu").rows() == EXPECTED
    by_line = []
    for i, text in enumerate(FIXTURE.read_text().splitlines(), start=1):
        res = parser.parse_line(text, ctx)
        if isinstance(res, Parsed):
            by_line += [(i, r["kind"], r["gpu"]) for r in res.rows.get("events", [])]
    assert by_line == EXPECTED


GSP_AMD = Path(__file__).resolve().parents[2] / "data" / "kernel" / "gsp-dump-and-amd-mce.log"
# (line, kind, subkind, node): GSP's RPC-timeout dump banner without an Xid line, and AMD's MCE
# decoder head line; the dump's note and the decoder's detail lines are noise
GSP_AMD_EXPECTED = [
    (1, "gsp_timeout", "rpc_timeout_dump", None),
    (3, "memory", "amd_mce_ecc", "cpu-node-1"),
]


def test_gsp_timeout_dump_and_amd_mce_head(store) -> None:
    report = ingest_paths(store, [str(GSP_AMD)], now=datetime(2026, 3, 1))
    (f,) = report.files
    assert (f.lines, f.parsed, f.noise, f.quarantined) == (6, 2, 4, 0)
    rows = store.query("SELECT line, kind, subkind, node FROM events ORDER BY line").rows()
    assert rows == GSP_AMD_EXPECTED


def test_gsp_timeout_dump_and_amd_mce_same_on_both_paths() -> None:
    parser = KernelParser()
    ctx = ParseContext(file=str(GSP_AMD), year=2025)
    state = parser.new_state(ctx)
    frames = [
        parser.parse_chunk(c.lines, c.first_line, ctx, state).tables.get("events")
        for c in iter_chunks(GSP_AMD)
    ]
    frames.append(parser.finish(ctx, state).tables.get("events"))
    ev = pl.concat(
        [conform("events", f) for f in frames if f is not None] + [empty_frame("events")]
    )
    assert ev.sort("line").select("line", "kind", "subkind", "node").rows() == GSP_AMD_EXPECTED
    by_line = []
    for i, text in enumerate(GSP_AMD.read_text().splitlines(), start=1):
        res = parser.parse_line(text, ctx)
        if isinstance(res, Parsed):
            by_line += [(i, r["kind"], r["subkind"], r["node"]) for r in res.rows.get("events", [])]
    assert by_line == GSP_AMD_EXPECTED

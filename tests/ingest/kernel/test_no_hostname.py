"""Syslog / journal lines whose host was left out (``journalctl --no-hostname``, some collectors):
``Mar 14 09:15:02 kernel: NVRM: Xid ...``. The tag is not a host, and the Xid is still an event
with its code, line and time; the node is unknown, never the tag."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import polars as pl

from faultlens.ingest.base import ParseContext, Parsed
from faultlens.ingest.kernel.parser import KernelParser
from faultlens.ingest.pipeline import ingest_paths
from faultlens.ingest.prefixes import prefix_frame
from faultlens.ingest.reader import iter_chunks
from faultlens.ingest.schema import conform, empty_frame

FIXTURE = Path(__file__).resolve().parents[2] / "data" / "kernel" / "journal-no-hostname.log"
NOW = datetime(2026, 3, 1, 12, 0, 0)
# (line, Xid, node, time): read from the fixture's own text, line by line
EXPECTED = [
    (2, 79, None, datetime(2025, 3, 14, 9, 15, 2)),
    (4, 48, None, datetime(2025, 3, 14, 9, 16, 0)),
    (5, 94, "gpu-node-12", datetime(2025, 3, 14, 9, 17, 0)),
    (6, 13, None, datetime(2025, 3, 14, 9, 17, 30)),
]


def test_hostless_journal_xids_are_events(store) -> None:
    report = ingest_paths(store, [str(FIXTURE)], now=NOW, base_ctx=ParseContext(file="", year=2025))
    (f,) = report.files
    assert (f.lines, f.quarantined) == (6, 0)
    got = store.query("SELECT line, code, node, ts FROM events ORDER BY line").rows()
    assert [(line, code, node, ts) for line, code, node, ts in got] == EXPECTED
    nodes = store.query("SELECT DISTINCT node FROM events WHERE node IS NOT NULL").rows()
    assert nodes == [("gpu-node-12",)]  # never "kernel" or "kernel:"


def test_hostless_lines_same_on_line_and_chunk_paths() -> None:
    parser = KernelParser()
    ctx = ParseContext(file=str(FIXTURE), year=2025)
    state = parser.new_state(ctx)
    frames = [
        parser.parse_chunk(c.lines, c.first_line, ctx, state).tables.get("events")
        for c in iter_chunks(FIXTURE)
    ]
    frames.append(parser.finish(ctx, state).tables.get("events"))
    chunked = pl.concat(
        [conform("events", f) for f in frames if f is not None] + [empty_frame("events")]
    )
    by_line = []
    for i, text in enumerate(FIXTURE.read_text().splitlines(), start=1):
        res = parser.parse_line(text, ctx)
        if isinstance(res, Parsed):
            by_line += [(i, r["code"], r["node"], r["ts"]) for r in res.rows.get("events", [])]
    want = [(line, code, node, ts) for line, code, node, ts in EXPECTED]
    assert [r for r in by_line if r[1] is not None] == want
    rows = chunked.filter(pl.col("code").is_not_null()).sort("line")
    assert (
        list(zip(*(rows[c].to_list() for c in ("line", "code", "node", "ts")), strict=True)) == want
    )


def test_prefix_library_reads_the_hostless_syslog_shape() -> None:
    frame = pl.DataFrame(
        {
            "line": [1, 2],
            "raw": [
                "Jun 02 07:00:01 kernel: NVRM: Xid (PCI:0000:01:00): 31, x",
                "Jun 02 07:00:01 gpu-3 python[77]: [rank0]: hello",
            ],
        }
    )
    out = prefix_frame(frame, ParseContext(file="f", year=2024))
    assert out["p_host"].to_list() == [None, "gpu-3"]
    assert out["body"].to_list() == ["NVRM: Xid (PCI:0000:01:00): 31, x", "[rank0]: hello"]
    assert out["p_ts"].to_list() == [datetime(2024, 6, 2, 7, 0, 1)] * 2

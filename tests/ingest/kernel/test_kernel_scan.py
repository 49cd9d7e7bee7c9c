"""The kernel parser on its raw-scan path (``ingest.scan``) against the line-splitting pre-filter
path (``reader.iter_candidates``): identical rows and counts on every real kernel log."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from faultlens.ingest import lines
from faultlens.ingest.kernel import parser as kernel
from faultlens.ingest.pipeline import ingest_paths
from faultlens.ingest.store import Store
from tests.conftest import CORPUS

NOW = datetime(2026, 1, 1)
FILES = sorted(p.name for p in (CORPUS / "xid").glob("*")) if CORPUS.is_dir() else []
TABLES = ("events", "gpus", "quarantine", "ingested_files")
VOLATILE = {"id", "ingested_at", "path", "file"}


def ingest(path: Path, db: Path, raw_scan: bool, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(kernel.KernelParser, "raw_scan", raw_scan)
    monkeypatch.setattr(lines.LinesParser, "raw_scan", raw_scan)  # what reads a sniffed kernel log
    with Store(db) as store:
        report = ingest_paths(store, [str(path)], now=NOW)
        (f,) = report.files
        tables = {}
        for t in TABLES:
            q = store.query(f"SELECT * FROM {t}")
            cols = [c for c in q.columns if c not in VOLATILE]
            tables[t] = q.select(cols).sort(cols, nulls_last=True)
    return (f.format, f.status, f.lines, f.parsed, f.noise, f.quarantined), tables


@pytest.mark.parametrize("name", FILES)
def test_corpus_kernel_log_same_on_both_paths(corpus, name, tmp_path, monkeypatch) -> None:
    new, new_t = ingest(corpus / "xid" / name, tmp_path / "a.duckdb", True, monkeypatch)
    old, old_t = ingest(corpus / "xid" / name, tmp_path / "b.duckdb", False, monkeypatch)
    assert new == old
    assert new[2] == new[3] + new[4] + new[5]  # lines = parsed + noise + quarantined
    for t in TABLES:
        assert new_t[t].equals(old_t[t]), (t, new_t[t].head(3).to_dicts(), old_t[t].head(3))


def test_crlf_invalid_utf8_and_a_long_line_same_on_both_paths(corpus, tmp_path, monkeypatch):
    # Every corpus kernel log glued together with CRLF line ends, invalid UTF-8 and a 2 MB line.
    parts = [(corpus / "xid" / n).read_bytes() for n in FILES if n.endswith((".log", ".txt"))]
    body = b"".join(p if p.endswith(b"\n") else p + b"\n" for p in parts)
    body = body.replace(b"\n", b"\r\n", 200) + b"NVRM: Xid \xff\xfe broken\n" + b"x" * 2_000_000
    path = tmp_path / "mixed.log"
    path.write_bytes(body + b"\nNVRM: last line without newline")
    new, new_t = ingest(path, tmp_path / "a.duckdb", True, monkeypatch)
    old, old_t = ingest(path, tmp_path / "b.duckdb", False, monkeypatch)
    assert new == old and new[5] >= 1
    for t in TABLES:
        assert new_t[t].equals(old_t[t]), t
    assert (new_t["events"]["kind"] == "xid").sum() > 10

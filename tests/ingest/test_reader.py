"""Line accounting of the chunked reader on tricky bytes: every line comes out exactly once."""

from __future__ import annotations

import gzip
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest

from faultlens.ingest.errors import InputError
from faultlens.ingest.reader import (
    MAX_LINE_BYTES,
    iter_candidates,
    iter_chunks,
    literal_regex,
    split_lines,
)

TRICKY = (
    b"Feb 14 05:03:41 gpu-01 kernel: NVRM: Xid (PCI:0000:3b:00): 79, first\n"
    b"Epoch 1:  10%|#   | 5/50\rEpoch 1:  20%|##  | 10/50\n"  # tqdm: bare \r inside a line
    b"crlf line\r\n"
    b"\n"
    b"bad \xff\xfe utf8 NVRM here\n"
    b"nul \x00 byte\n"
    b"ctrl-a \x01 inside NVRM\n"
    b"\r\n"
    b"last line without newline Xid"
)
TRICKY_LINES = [
    "Feb 14 05:03:41 gpu-01 kernel: NVRM: Xid (PCI:0000:3b:00): 79, first",
    "Epoch 1:  10%|#   | 5/50\rEpoch 1:  20%|##  | 10/50",
    "crlf line",
    None,
    "bad \ufffd\ufffd utf8 NVRM here",
    "nul \x00 byte",
    "ctrl-a \x01 inside NVRM",
    None,
    "last line without newline Xid",
]


def all_lines(path: Path, **kw) -> list[str | None]:
    out: list[str | None] = []
    expect_first = kw.get("start_line", 1)
    for chunk in iter_chunks(path, **kw):
        assert chunk.first_line == expect_first
        out.extend(chunk.lines.to_list())
        expect_first += chunk.lines.len()
    return out


@pytest.fixture
def tricky(tmp_path: Path) -> Path:
    path = tmp_path / "tricky.log"
    path.write_bytes(TRICKY)
    return path


def test_split_lines_tricky_block():
    assert split_lines(TRICKY).to_list() == TRICKY_LINES
    assert split_lines(b"").to_list() == []
    assert split_lines(b"\n\n").to_list() == [None, None]
    assert split_lines(b"a\r\r\n").to_list() == ["a\r"]  # only one \r before \n is dropped


@pytest.mark.parametrize("chunk_bytes", [1, 7, 64, 1 << 20])
@pytest.mark.parametrize("threaded", [False, True])
def test_iter_chunks_tricky_any_chunk_size(tricky, chunk_bytes, threaded):
    got = all_lines(tricky, chunk_bytes=chunk_bytes, threaded=threaded)
    assert len(got) == 9 == TRICKY.count(b"\n") + 1
    assert got == TRICKY_LINES


def test_line_straddling_the_chunk_boundary(tmp_path):
    path = tmp_path / "straddle.log"
    path.write_bytes(b"short\n" + b"x" * 100 + b"\nend\n")
    chunks = list(iter_chunks(path, chunk_bytes=16))
    lines = [ln for c in chunks for ln in c.lines.to_list()]
    assert lines == ["short", "x" * 100, "end"]
    # the long line is read on until its \n; the block holding it also holds "end"
    assert [c.first_line for c in chunks] == [1, 2]
    assert chunks[-1].end_byte == path.stat().st_size == 6 + 101 + 4


def test_gzip_same_lines_and_end_byte(tmp_path, tricky):
    gz = tmp_path / "tricky.log.gz"
    gz.write_bytes(gzip.compress(TRICKY))
    chunks = list(iter_chunks(gz, gzipped=True, chunk_bytes=13))
    assert [ln for c in chunks for ln in c.lines.to_list()] == TRICKY_LINES
    assert chunks[-1].end_byte == len(TRICKY)  # offsets count decompressed bytes


def test_start_byte_resume(tmp_path):
    path = tmp_path / "grow.log"
    first = b"one\ntwo\n"
    path.write_bytes(first + b"three\nfour")
    got = all_lines(path, start_byte=len(first), start_line=3, chunk_bytes=4)
    assert got == ["three", "four"]
    gz = tmp_path / "grow.log.gz"
    gz.write_bytes(gzip.compress(first + b"three\nfour"))
    assert all_lines(gz, gzipped=True, start_byte=len(first), start_line=3) == ["three", "four"]


def test_truncated_gzip_raises_input_error_also_from_the_thread(tmp_path):
    gz = tmp_path / "cut.log.gz"
    gz.write_bytes(gzip.compress(b"line\n" * 5000)[:-30])
    for threaded in (False, True):
        with pytest.raises(InputError, match="truncated or corrupt gzip"):
            list(iter_chunks(gz, gzipped=True, threaded=threaded))


def test_missing_file_raises_input_error(tmp_path):
    with pytest.raises(InputError, match="cannot read"):
        list(iter_candidates(tmp_path / "nope.log", ["NVRM"], threaded=True))


def test_abandoned_threaded_iterator_stops(tmp_path):
    path = tmp_path / "many.log"
    path.write_bytes(b"NVRM line\n" * 20_000)
    it = iter_chunks(path, chunk_bytes=1024, threaded=True)
    first = next(it)
    assert first.lines[0] == "NVRM line" and first.first_line == 1
    it.close()  # the reader thread is told to stop and joined; nothing hangs


# -- the pre-filtered form -------------------------------------------------------------------------


@pytest.mark.parametrize("chunk_bytes", [5, 64, 1 << 20])
@pytest.mark.parametrize("threaded", [False, True])
def test_iter_candidates_numbers_and_counts(tricky, chunk_bytes, threaded):
    chunks = list(
        iter_candidates(tricky, ["NVRM", "Xid"], chunk_bytes=chunk_bytes, threaded=threaded)
    )
    assert sum(c.n_lines for c in chunks) == 9
    cand = pl.concat([c.cand for c in chunks])
    assert cand["line"].to_list() == [1, 5, 7, 9]
    assert cand["raw"].to_list() == [TRICKY_LINES[i - 1] for i in (1, 5, 7, 9)]
    # chunks tile the file: each starts where the last ended
    for a, b in zip(chunks, chunks[1:], strict=False):
        assert b.first_line == a.last_line + 1
    assert chunks[-1].last_line == 9 and chunks[-1].end_byte == len(TRICKY)


def test_literal_regex_escapes_specials():
    s = pl.Series(["a [Hardware Error]: x", "AER: y", "Hardware Error", "a.b", "axb", None])
    rx = literal_regex(["[Hardware Error]", "AER:", "a.b"])
    assert s.str.contains(rx).to_list() == [True, True, False, True, False, None]


def test_over_long_lines_are_listed_not_candidates(tmp_path):
    path = tmp_path / "long.log"
    long_hit = b"NVRM: " + b"y" * (MAX_LINE_BYTES + 10)
    long_noise = b"z" * (MAX_LINE_BYTES + 1)
    path.write_bytes(b"NVRM: short\n" + long_hit + b"\n" + long_noise + b"\nNVRM end\n")
    (chunk,) = list(iter_candidates(path, ["NVRM"]))
    assert chunk.n_lines == 4
    assert chunk.cand["line"].to_list() == [1, 4]
    assert chunk.too_long is not None
    assert chunk.too_long["line"].to_list() == [2, 3]
    assert chunk.too_long["bytes"].to_list() == [len(long_hit), len(long_noise)]
    assert chunk.too_long["raw"].str.len_chars().to_list() == [4000, 4000]


def test_pipeline_quarantines_over_long_lines_on_the_prefilter_path(tmp_path, store):
    from faultlens.ingest.pipeline import ingest_paths

    path = tmp_path / "dmesg.log"
    xid = b"[  12.5] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"
    path.write_bytes(
        xid
        + b"[  13.0] NVRM: "
        + b"y" * (MAX_LINE_BYTES + 5)
        + b"\n"
        + b"[  14.0] usb 1-1: new device\n" * 3
        + b"\n"
    )
    report = ingest_paths(store, [str(path)], now=datetime(2026, 1, 1), fmt="kernel")
    f = report.files[0]
    assert (f.status, f.lines, f.parsed, f.quarantined, f.noise) == ("partial", 6, 1, 1, 4)
    q = store.query("SELECT line, reason FROM quarantine").row(0)
    assert q == (2, f"line too long ({MAX_LINE_BYTES + 20} bytes > {MAX_LINE_BYTES})")
    assert store.query("SELECT line, code FROM events").row(0) == (1, 79)


def test_a_file_being_written_is_read_to_its_last_complete_line(tmp_path) -> None:
    import os
    import time

    from faultlens.ingest.reader import iter_chunks

    log = tmp_path / "kern.log"
    log.write_bytes(b"first\nsecond\nthi")  # the writer is in the middle of line 3
    live_since = log.stat().st_mtime - 1  # the caller's clock minus its live-write window
    chunks = list(iter_chunks(log, live_since=live_since))
    assert [c.lines.to_list() for c in chunks] == [["first", "second"]]
    assert chunks[-1].end_byte == len(b"first\nsecond\n")  # the registry resumes at line 3
    # no window given: the file is read to its end
    assert [x for c in iter_chunks(log) for x in c.lines.to_list()] == ["first", "second", "thi"]
    old = time.time() - 60
    os.utime(log, (old, old))  # quiet for a minute: the last line is complete as it stands
    lines = [x for c in iter_chunks(log, live_since=time.time() - 30) for x in c.lines.to_list()]
    assert lines == ["first", "second", "thi"]

"""The raw-byte candidate scanner: the same candidate lines as splitting every line, on tricky
bytes, at any block size, with either engine."""

from __future__ import annotations

import gzip
from pathlib import Path

import polars as pl
import pytest

from faultlens.ingest import scan
from faultlens.ingest.errors import InputError
from faultlens.ingest.reader import MAX_LINE_BYTES, iter_chunks

LITERALS = ("NVRM", "Xid", "Last error:", " float ")
FOLLOW = "Last error:"
TRICKY = (
    b"Feb 14 05:03:41 gpu-01 kernel: NVRM: Xid (PCI:0000:3b:00): 79, first\n"
    b"Epoch 1:  10%|#   | 5/50\rEpoch 1:  20%|##  | 10/50\n"  # tqdm: bare \r inside a line
    b"crlf NVRM line\r\n"
    b"\n"
    b"bad \xff\xfe utf8 NVRM here\n"
    b"nul \x00 byte\n"
    b"ctrl-a \x01 inside NVRM\n"
    b"\r\n"
    b"[rank0]: Last error:\n"
    b"[rank0]: detail without a literal\r\n"
    b"Last error:\r\n"
    b"\r\n"  # empty after a Last error: line: no candidate
    b"after the empty line\n"
    b"two \r\r\n"
    b"   1024   256   float  sum  -1  12.3  0.08  0.15  0\n"
    b"Last error: twice Last error:\n"
    b"Last error:\n"
    b"chained detail \xe2\x82 truncated utf8\n"
    b"last line without newline Xid\r"
)
# (line, text, follows) of TRICKY's candidates
TRICKY_CANDIDATES = [
    (1, "Feb 14 05:03:41 gpu-01 kernel: NVRM: Xid (PCI:0000:3b:00): 79, first", False),
    (3, "crlf NVRM line", False),
    (5, "bad \ufffd\ufffd utf8 NVRM here", False),
    (7, "ctrl-a \x01 inside NVRM", False),
    (9, "[rank0]: Last error:", False),
    (10, "[rank0]: detail without a literal", True),
    (11, "Last error:", False),
    (15, "   1024   256   float  sum  -1  12.3  0.08  0.15  0", False),
    (16, "Last error: twice Last error:", False),
    (17, "Last error:", True),
    (18, "chained detail \ufffd truncated utf8", True),
    (19, "last line without newline Xid", False),
]


def expected(path: Path, literals=LITERALS, follow: str | None = FOLLOW) -> tuple[list, int, list]:
    """Candidates, line count and over-long lines by the definition, from the line reader."""
    lines = [x for c in iter_chunks(path) for x in c.lines.to_list()]
    cands, longs, prev = [], [], False
    for i, text in enumerate(lines, start=1):
        if text is not None and len(text.encode()) > MAX_LINE_BYTES:
            longs.append((i, len(text.encode()), text[:4000]))
            text = None
        if text is None:
            prev = False
            continue
        hit = any(lit in text for lit in literals)
        if hit or prev:
            cands.append((i, text, prev))
        prev = follow is not None and follow in text
    return cands, len(lines), longs


def scanned(path: Path, **kw) -> tuple[list, int, list, int]:
    kw.setdefault("follow", FOLLOW)
    cands, longs, n, end = [], [], 0, 0
    expect_first = kw.get("start_line", 1)
    for chunk in scan.iter_scan(path, LITERALS, **kw):
        assert chunk.first_line == expect_first
        assert chunk.cand["line"].dtype == pl.Int64 and chunk.cand["raw"].dtype == pl.String
        follows = chunk.cand["follows"] if kw["follow"] else [False] * chunk.cand.height
        cands += list(zip(chunk.cand["line"], chunk.cand["raw"], follows, strict=True))
        if chunk.too_long is not None:
            longs += chunk.too_long.rows()
        n += chunk.n_lines
        expect_first += chunk.n_lines
        end = chunk.end_byte
    return cands, n, longs, end


ENGINES = ["hyperscan", "polars"] if scan.available() else ["polars"]


@pytest.fixture
def tricky(tmp_path: Path) -> Path:
    path = tmp_path / "tricky.log"
    path.write_bytes(TRICKY)
    return path


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("block_bytes", [1, 7, 64, 1 << 20])
def test_tricky_bytes_any_block_size(tricky: Path, engine: str, block_bytes: int) -> None:
    cands, n, longs, end = scanned(tricky, engine=engine, block_bytes=block_bytes)
    assert cands == TRICKY_CANDIDATES
    assert (cands, n, longs) == expected(tricky)
    assert n == 19 == TRICKY.count(b"\n") + 1
    assert end == len(TRICKY)


@pytest.mark.parametrize("engine", ENGINES)
def test_without_follow_and_threaded(tricky: Path, engine: str) -> None:
    cands, n, _, _ = scanned(tricky, engine=engine, follow=None, threaded=True, block_bytes=50)
    assert [c[0] for c in cands] == [1, 3, 5, 7, 9, 11, 15, 16, 17, 19]
    assert n == 19


@pytest.mark.parametrize("engine", ENGINES)
def test_over_long_lines_are_listed_not_candidates(tmp_path: Path, engine: str) -> None:
    path = tmp_path / "long.log"
    big = b"Xid " + b"x" * MAX_LINE_BYTES + b"\n"  # holds a literal, too long: not a candidate
    grown = b"NVRM " + b"\xff" * (MAX_LINE_BYTES // 3 + 10) + b"\n"  # too long once decoded
    path.write_bytes(
        b"Last error:\n"
        + big
        + b"after the long line\n"
        + b"Last error:\n"
        + grown
        + b"fits NVRM "
        + b"y" * 1000
        + b"\n"
        + b"Last error:\nz\n"
    )
    cands, n, longs, _ = scanned(path, engine=engine, block_bytes=1 << 16)
    assert (cands, n, longs) == expected(path)
    assert [c[0] for c in cands] == [1, 4, 6, 7, 8]  # the lines after 1 and 4 are too long
    assert [(line, nbytes) for line, nbytes, _ in longs] == [
        (2, 4 + MAX_LINE_BYTES),
        (5, 5 + 3 * (MAX_LINE_BYTES // 3 + 10)),
    ]
    assert longs[0][2] == "Xid " + "x" * 3996


@pytest.mark.parametrize("engine", ENGINES)
def test_long_lines_inside_one_block(tmp_path: Path, engine: str) -> None:
    """Several long lines among short ones in one block: each is found (probed every third of
    the limit), and only those over the limit are listed."""
    third = MAX_LINE_BYTES // 3
    path = tmp_path / "longs.log"
    path.write_bytes(
        b"".join(
            [
                b"NVRM short\n",
                b"Xid " + b"a" * (third - 10) + b"\n",  # under a third: not even decoded
                b"Xid " + b"b" * (third + 5) + b"\n",  # decoded, fits
                b"Xid " + b"c" * MAX_LINE_BYTES + b"\n",  # too long
                b"Xid " + b"d" * (MAX_LINE_BYTES + 1) + b"\n",  # too long, right after another
                b"Last error:\n",
                b"e" * (2 * MAX_LINE_BYTES) + b"\r\n",  # a too-long detail line
                b"NVRM end\n",
            ]
        )
    )
    cands, n, longs, _ = scanned(path, engine=engine, block_bytes=16 << 20)
    assert (cands, n, longs) == expected(path)
    assert [line for line, _, _ in longs] == [4, 5, 7]
    assert [c[0] for c in cands] == [1, 2, 3, 6, 8]
    assert n == 8


@pytest.mark.parametrize("engine", ENGINES)
def test_gzip_and_start_byte(tmp_path: Path, tricky: Path, engine: str) -> None:
    gz = tmp_path / "tricky.log.gz"
    gz.write_bytes(gzip.compress(TRICKY))
    assert scanned(gz, engine=engine, gzipped=True, block_bytes=16)[0] == TRICKY_CANDIDATES
    start = TRICKY.index(b"[rank0]")  # a grown file read on from line 9
    for path, zipped in ((tricky, False), (gz, True)):
        cands, n, _, end = scanned(
            path, engine=engine, gzipped=zipped, start_byte=start, start_line=9, block_bytes=32
        )
        assert cands == TRICKY_CANDIDATES[4:]
        assert n == 11
        assert end == len(TRICKY)


@pytest.mark.parametrize("engine", ENGINES)
def test_empty_file_and_errors(tmp_path: Path, engine: str) -> None:
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    assert list(scan.iter_scan(empty, LITERALS, engine=engine)) == []
    with pytest.raises(InputError):
        list(scan.iter_scan(tmp_path / "missing.log", LITERALS, engine=engine))
    bad = tmp_path / "bad.gz"
    bad.write_bytes(gzip.compress(TRICKY)[:40])
    with pytest.raises(InputError, match="truncated or corrupt"):
        list(scan.iter_scan(bad, LITERALS, engine=engine, gzipped=True))
    with pytest.raises(ValueError):
        scan.iter_scan(empty, LITERALS, follow="not a literal")


def test_falls_back_to_polars_without_hyperscan(
    tricky: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scan, "available", lambda: False)
    monkeypatch.setattr(scan, "_hs_chunks", None)  # would fail if used
    assert scanned(tricky, block_bytes=64)[0] == TRICKY_CANDIDATES


def test_newline_bits_across_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    monkeypatch.setattr(scan, "SUB_BYTES", 100)  # rounded down to 64: many pieces, odd tail
    raw = b"ab\n" * 1000 + b"\n" + b"x" * 200 + b"\n"
    bits = scan.NewlineBits(np.frombuffer(raw, np.uint8))
    nl = np.array([i for i, c in enumerate(raw) if c == 10], np.int64)
    assert bits.total == 1002
    assert bits.before(nl).tolist() == list(range(1002))
    assert bits.before(np.array([0, 2, 3, 3001, 3100], np.int64)).tolist() == [0, 0, 1, 1001, 1001]
    starts = bits.line_starts(nl, bits.before(nl))
    assert starts.tolist() == [0, *(nl[:-1] + 1).tolist()]
    assert starts[-1] == 3001 and nl[-1] == 3201  # a 200-byte line starts words back

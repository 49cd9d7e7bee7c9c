"""Candidate lines straight from raw bytes: a multi-literal search over large blocks.

For a sparse format (about 2% of a training log's lines matter to the NCCL parser), splitting every
line into a string only to test it for a few literals is most of the cost of ingest. Here the
search runs on the raw bytes of a 64 MiB block instead:

- Intel Hyperscan scans the block for ``(?:lit1|lit2|...)[^\\n]*\\n``. The only end of a match is
  the newline of a line holding a literal, so there is one callback per candidate *line*, and its
  offset is that line's end.
- A numpy newline index (in 1 MiB pieces, so that the temporaries stay in cache) gives every hit
  its line number and its bounds, counts the lines, and finds over-long lines.
- Only the candidate lines are copied out of the block (one Arrow ``take`` over a zero-copy view
  of it) and decoded; invalid UTF-8 is replaced (U+FFFD), as the line reader does.

The chunks are ``reader.CandidateChunk``s, exactly what ``reader.iter_candidates`` yields for the
same file: lines end at ``\\n`` with one ``\\r`` before it dropped, empty lines are never
candidates, lines longer than ``reader.MAX_LINE_BYTES`` are listed in ``too_long`` instead, gzip
input and ``start_byte`` / ``start_line`` work the same. With ``follow``, the line after each line
holding that literal is a candidate too (flagged in a ``follows`` column), across block ends.

Without the ``hyperscan`` package (another architecture), the same chunks come from the polars line
splitter and ``str.contains`` (``engine="polars"``), several times slower.
"""

from __future__ import annotations

import functools
import gzip
import re
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from ingest import reader
from ingest.errors import InputError
from ingest.reader import MAX_LINE_BYTES, CandidateChunk

BLOCK_BYTES = 64 * 1024 * 1024  # bytes scanned per block
SUB_BYTES = 1 << 20  # piece of a block the newline index works on
RAW_KEEP_CHARS = 4000  # text kept of an over-long line (as ``reader.iter_candidates``)
_CAND_SCHEMA = {"line": pl.Int64, "raw": pl.String}
_LONG_SCHEMA = {"line": pl.Int64, "bytes": pl.Int64, "raw": pl.String}


def available() -> bool:
    """Whether the Hyperscan engine can run here (the ``hyperscan`` wheel is x86-64 / arm64)."""
    try:
        import hyperscan  # noqa: F401
    except ImportError:
        return False
    return True


def iter_scan(
    path: str | Path,
    literals: Sequence[str],
    *,
    follow: str | None = None,
    gzipped: bool = False,
    start_byte: int = 0,
    start_line: int = 1,
    block_bytes: int = BLOCK_BYTES,
    threaded: bool = False,
    engine: str | None = None,
) -> Iterator[CandidateChunk]:
    """The candidate lines of ``path`` (those holding one of ``literals``), block by block.

    ``follow`` (one of ``literals``): the line after a line holding it is a candidate as well,
    with ``follows`` true. ``engine``: ``"hyperscan"`` or ``"polars"``; by default Hyperscan when
    it can be imported. Raises ``InputError`` for unreadable or corrupt input.
    """
    if follow is not None and follow not in literals:
        raise ValueError(f"follow literal {follow!r} must be one of the literals")
    if any("\n" in lit or not lit for lit in literals):
        raise ValueError("literals must be non-empty and hold no newline")
    engine = engine or ("hyperscan" if available() else "polars")
    if engine == "hyperscan":
        make = functools.partial(_hs_chunks, path, tuple(literals), follow, gzipped, start_byte,
                                 start_line, block_bytes)
    elif engine == "polars":
        make = functools.partial(_polars_chunks, path, tuple(literals), follow, gzipped,
                                 start_byte, start_line, block_bytes)
    else:
        raise ValueError(f"unknown scan engine {engine!r}")
    return reader._in_thread(make) if threaded else make()


# -- the Hyperscan engine --------------------------------------------------------------------------


@functools.cache
def _database(literals: tuple[str, ...], follow: str | None) -> Any:
    """One compiled Hyperscan database per literal set: pattern 0 is any literal up to the end of
    its line, pattern 1 the ``follow`` literal the same way."""
    import hyperscan

    def line_of(alternatives: str) -> bytes:
        return f"(?:{alternatives})[^\\n]*\\n".encode()

    exprs = [line_of("|".join(_escape(lit) for lit in literals))]
    if follow is not None:
        exprs.append(line_of(_escape(follow)))
    db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    db.compile(expressions=exprs, ids=list(range(len(exprs))), elements=len(exprs),
               flags=[0] * len(exprs))
    return db


def _escape(literal: str) -> str:
    """A literal as a Hyperscan (PCRE-syntax) pattern over its UTF-8 bytes."""
    return "".join(c if c.isascii() and c.isalnum() else f"\\x{b:02x}"
                   for c in literal for b in c.encode())


def _hs_chunks(
    path: str | Path, literals: tuple[str, ...], follow: str | None, gzipped: bool,
    start_byte: int, start_line: int, block_bytes: int,
) -> Iterator[CandidateChunk]:
    import hyperscan

    db = _database(literals, follow)
    scratch = hyperscan.Scratch(db)  # one per scan: a database may be shared between threads
    ends: list[int] = []
    follow_ends: list[int] = []
    sinks = (ends.append, follow_ends.append)

    def on_match(pattern: int, _start: int, end: int, _flags: int, _ctx: object) -> None:
        sinks[pattern](end)

    line_no, offset, prev_follow = start_line, start_byte, False
    for buf, body_len, real_len in _blocks(path, gzipped, start_byte, block_bytes):
        ends.clear()
        follow_ends.clear()
        db.scan(memoryview(buf)[:body_len], match_event_handler=on_match, scratch=scratch)
        offset += real_len
        chunk, prev_follow = block_candidates(
            buf, body_len, ends, follow_ends if follow else None, line_no, offset, prev_follow)
        line_no += chunk.n_lines
        yield chunk


def _blocks(
    path: str | Path, gzipped: bool, start_byte: int, block_bytes: int
) -> Iterator[tuple[bytearray, int, int]]:
    """(buffer, body length, bytes of the file in the body): ``buf[:body]`` is whole lines, each
    ending in ``\\n`` (one is added after a last line without it).

    One buffer is read into again and again (a fresh 64 MiB ``bytes`` per block costs more in page
    faults than the scan): what is yielded is only valid until the next block is asked for.
    """
    try:
        with reader._open_stream(path, gzipped) as f:
            if start_byte:
                if gzipped:
                    reader._skip(f, start_byte)
                else:
                    f.seek(start_byte)
            yield from _fill(f, block_bytes)
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise InputError(f"{path}: truncated or corrupt gzip stream ({e})") from e
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror or e}") from e


def _fill(f: Any, block_bytes: int) -> Iterator[tuple[bytearray, int, int]]:
    buf = bytearray(block_bytes + 1)  # + 1: room for the newline after a last line without one
    view = memoryview(buf)
    kept = 0  # bytes of a partial line carried to the front of the buffer
    while True:
        got = f.readinto(view[kept:len(buf) - 1])
        size = kept + got
        if got == 0:
            if kept:
                buf[kept] = 10
                yield buf, kept + 1, kept
            return
        cut = buf.rfind(b"\n", 0, size) + 1
        if cut == 0:  # a line longer than the buffer: grow it and read on
            view.release()
            buf.extend(bytes(len(buf)))
            view, kept = memoryview(buf), size
            continue
        yield buf, cut, cut
        buf[: size - cut] = view[cut:size]
        kept = size - cut


def newline_index(data: np.ndarray) -> np.ndarray:
    """Offsets of the ``\\n`` bytes of ``data`` (uint8), computed in ``SUB_BYTES`` pieces."""
    if len(data) == 0:
        return np.empty(0, np.int64)
    mask = np.empty(min(SUB_BYTES, len(data)), np.bool_)
    parts = []
    for k in range(0, len(data), SUB_BYTES):
        piece = data[k:k + SUB_BYTES]
        m = mask[: len(piece)]
        np.equal(piece, 10, out=m)
        found = np.flatnonzero(m)
        if k:
            found += k
        parts.append(found)
    return np.concatenate(parts) if len(parts) > 1 else parts[0]


def block_candidates(
    buf: bytes | bytearray, body_len: int, ends: Sequence[int], follow_ends: Sequence[int] | None,
    first_line: int, end_byte: int, prev_follow: bool,
) -> tuple[CandidateChunk, bool]:
    """The candidates of one block of whole lines, given the end offsets of its lines holding a
    literal (and of those holding the ``follow`` literal). Also returns whether the block's last
    line holds ``follow`` (its successor, in the next block, is then a candidate)."""
    data = np.frombuffer(buf, np.uint8, count=body_len)
    nl = newline_index(data)
    n = len(nl)
    too_long, long_idx = _too_long(buf, data, nl, first_line)
    hit = _line_idx(nl, ends, long_idx)
    cand_idx, follows, next_follow = hit, None, False
    if follow_ends is not None:
        holder = _line_idx(nl, follow_ends, long_idx)
        next_follow = bool(len(holder)) and int(holder[-1]) == n - 1
        after = holder + 1
        if prev_follow:
            after = np.concatenate([np.zeros(1, np.int64), after])
        after = after[after < n]
        if len(after):
            start, stop = _bounds(data, nl, after)
            after = after[stop > start]  # an empty line is no candidate
        if len(long_idx):
            after = after[~np.isin(after, long_idx)]
        cand_idx = np.union1d(hit, after) if len(after) else hit
        follows = np.isin(cand_idx, after) if len(after) else np.zeros(len(cand_idx), np.bool_)
    start, stop = _bounds(data, nl, cand_idx)
    columns: dict[str, Any] = {
        "line": pl.Series("line", cand_idx + first_line, dtype=pl.Int64),
        "raw": _texts(buf, start, stop),
    }
    if follows is not None:
        columns["follows"] = pl.Series("follows", follows, dtype=pl.Boolean)
    chunk = CandidateChunk(pl.DataFrame(columns), first_line, n, end_byte, too_long)
    return chunk, next_follow


def _bounds(data: np.ndarray, nl: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and (exclusive) stop offsets of lines ``idx`` (one ``\\r`` before ``\\n`` dropped)."""
    start = np.zeros(len(idx), np.int64)
    later = idx > 0
    start[later] = nl[idx[later] - 1] + 1
    stop = nl[idx]
    stop = stop - ((stop > start) & (data[np.maximum(stop - 1, 0)] == 13))
    return start, stop


def _line_idx(nl: np.ndarray, ends: Sequence[int], long_idx: np.ndarray) -> np.ndarray:
    """Sorted unique line indexes of lines ending at ``ends`` (offsets just past their newline),
    over-long lines left out."""
    if not len(ends):
        return np.empty(0, np.int64)
    idx = np.unique(np.searchsorted(nl, np.asarray(ends, np.int64) - 1))
    if len(long_idx):
        idx = idx[~np.isin(idx, long_idx)]
    return idx


def _too_long(
    buf: bytes | bytearray, data: np.ndarray, nl: np.ndarray, first_line: int
) -> tuple[pl.DataFrame | None, np.ndarray]:
    """Lines longer than ``MAX_LINE_BYTES`` once decoded (a replaced byte grows to 3), and their
    indexes. Only lines of more than a third of the limit are decoded to tell."""
    maybe = np.flatnonzero(np.diff(nl, prepend=-1) > MAX_LINE_BYTES // 3)
    rows = []
    if len(maybe):
        starts, stops = _bounds(data, nl, maybe)
        for i, a, b in zip(maybe.tolist(), starts.tolist(), stops.tolist(), strict=True):
            text = bytes(buf[a:b]).decode("utf-8", "replace")
            nbytes = len(text.encode())
            if nbytes > MAX_LINE_BYTES:
                rows.append((i, nbytes, text[:RAW_KEEP_CHARS]))
    if not rows:
        return None, np.empty(0, np.int64)
    idx = np.array([r[0] for r in rows], np.int64)
    frame = pl.DataFrame({"line": idx + first_line, "bytes": [r[1] for r in rows],
                          "raw": [r[2] for r in rows]}, schema=_LONG_SCHEMA)
    return frame, idx


def _texts(buf: bytes | bytearray, starts: np.ndarray, stops: np.ndarray) -> pl.Series:
    """``buf[start:stop]`` for each pair, as a String series (invalid UTF-8 replaced).

    The pairs are sorted and disjoint, so ``start0, stop0, start1, stop1, ...`` is a valid offsets
    buffer over ``buf``: the lines are its even elements, taken in one copy."""
    k = len(starts)
    if k == 0:
        return pl.Series("raw", [], dtype=pl.String)
    offsets = np.empty(2 * k + 1, np.int64)
    offsets[0:2 * k:2] = starts
    offsets[1:2 * k:2] = stops
    offsets[2 * k] = stops[-1]
    view = pa.Array.from_buffers(pa.large_binary(), 2 * k,
                                 [None, pa.py_buffer(offsets), pa.py_buffer(buf)])
    lines = view.take(pa.array(np.arange(0, 2 * k, 2)))
    try:
        text = pc.cast(lines, pa.large_string())
    except pa.ArrowInvalid:  # invalid UTF-8 somewhere: decode these lines as the reader does
        text = pa.array([b.decode("utf-8", "replace") for b in lines.to_pylist()],
                        pa.large_string())
    return pl.Series("raw", pl.from_arrow(text), dtype=pl.String)


# -- the polars engine (no Hyperscan) --------------------------------------------------------------


def _polars_chunks(
    path: str | Path, literals: tuple[str, ...], follow: str | None, gzipped: bool,
    start_byte: int, start_line: int, block_bytes: int,
) -> Iterator[CandidateChunk]:
    pattern = "|".join(re.escape(lit) for lit in literals)
    line_no, offset, prev_follow = start_line, start_byte, False
    for lines, body_len in reader._raw_chunks(path, gzipped, start_byte, block_bytes):
        offset += body_len
        chunk = reader._candidates(lines, line_no, offset, pattern)
        if follow is not None:
            chunk, prev_follow = _with_follows(chunk, lines, follow, prev_follow)
        line_no += lines.len()
        yield chunk


def _with_follows(
    chunk: CandidateChunk, lines: pl.Series, follow: str, prev_follow: bool
) -> tuple[CandidateChunk, bool]:
    n = lines.len()
    cand = chunk.cand
    idx = cand["line"] - chunk.first_line
    holder = idx.filter(cand["raw"].str.contains(follow, literal=True))
    next_follow = holder.len() > 0 and holder[-1] == n - 1
    after = (holder + 1).to_numpy()
    if prev_follow:
        after = np.concatenate([np.zeros(1, after.dtype), after])
    after = after[after < n]
    if len(after):
        text = lines.gather(after)
        ok = (text.is_not_null() & (text.str.len_bytes() <= MAX_LINE_BYTES)).to_numpy()
        after = after[ok]
    if len(after) == 0:
        cand = cand.with_columns(follows=pl.repeat(False, cand.height, eager=True))
        return _replace(chunk, cand), next_follow
    all_idx = np.union1d(idx.to_numpy(), after)
    cand = pl.DataFrame({
        "line": pl.Series(all_idx + chunk.first_line, dtype=pl.Int64),
        "raw": lines.gather(all_idx),
        "follows": pl.Series(np.isin(all_idx, after), dtype=pl.Boolean),
    })
    return _replace(chunk, cand), next_follow


def _replace(chunk: CandidateChunk, cand: pl.DataFrame) -> CandidateChunk:
    return CandidateChunk(cand, chunk.first_line, chunk.n_lines, chunk.end_byte, chunk.too_long)


__all__ = ["BLOCK_BYTES", "available", "block_candidates", "iter_scan", "newline_index"]

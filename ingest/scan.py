"""Candidate lines straight from raw bytes: a multi-literal search over large blocks.

For a sparse format (about 2% of a training log's lines matter to the NCCL parser), splitting every
line into a string only to test it for a few literals is most of the cost of ingest. Here the
search runs on the raw bytes of a 64 MiB block instead:

- Intel Hyperscan scans the block for ``(?:lit1|lit2|...)[^\\n]*\\n``. The only end of a match is
  the newline of a line holding a literal, so there is one callback per candidate *line*, and its
  offset is that line's end.
- A newline bitmap with running counts per 64-bit word (numpy, in 1 MiB pieces so that the byte
  mask stays in cache) counts the lines and gives every hit its line number and its start,
  without listing every newline; over-long lines are found by probing every third of the limit.
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
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from faultlens.ingest import reader
from faultlens.ingest.reader import MAX_LINE_BYTES, CandidateChunk

BLOCK_BYTES = 64 * 1024 * 1024  # bytes scanned per block
SUB_BYTES = 1 << 20  # piece of a block the newline bitmap is built from
PREFETCH = 8  # blocks' candidates the scanning thread may run ahead of the parser
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
    follow: str | tuple[str, ...] | None = None,
    gzipped: bool = False,
    start_byte: int = 0,
    start_line: int = 1,
    block_bytes: int = BLOCK_BYTES,
    threaded: bool = False,
    engine: str | None = None,
    live_since: float | None = None,
) -> Iterator[CandidateChunk]:
    """The candidate lines of ``path`` (those holding one of ``literals``), block by block.

    ``follow`` (one of ``literals``, or a tuple of them): the line after a line holding it is a
    candidate as well, with ``follows`` true. ``engine``: ``"hyperscan"`` or ``"polars"``; by
    default Hyperscan when it can be imported. Raises ``InputError`` for unreadable or corrupt
    input.
    """
    if isinstance(follow, str):
        follow = (follow,)
    if follow is not None and not set(follow) <= set(literals):
        raise ValueError(f"follow literals {follow!r} must be among the literals")
    if any("\n" in lit or not lit for lit in literals):
        raise ValueError("literals must be non-empty and hold no newline")
    engine = engine or ("hyperscan" if available() else "polars")
    engines = {"hyperscan": _hs_chunks, "polars": _polars_chunks}
    if engine not in engines:
        raise ValueError(f"unknown scan engine {engine!r}")
    make = functools.partial(
        engines[engine],
        path,
        tuple(literals),
        follow,
        gzipped,
        start_byte,
        start_line,
        block_bytes,
        live_since,
    )
    # a block's candidates are small (the block itself is not kept): let the scan run well
    # ahead of the parser, so that neither waits for the other
    return reader.in_thread(make, depth=PREFETCH) if threaded else make()


# -- the Hyperscan engine --------------------------------------------------------------------------


@functools.cache
def _database(literals: tuple[str, ...], follow: tuple[str, ...] | None) -> Any:
    """One compiled Hyperscan database per literal set: pattern 0 is any literal up to the end of
    its line, pattern 1 the ``follow`` literal the same way."""
    import hyperscan

    def line_of(alternatives: str) -> bytes:
        return f"(?:{alternatives})[^\\n]*\\n".encode()

    exprs = [line_of("|".join(_escape(lit) for lit in literals))]
    if follow is not None:
        exprs.append(line_of("|".join(_escape(lit) for lit in follow)))
    db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    db.compile(
        expressions=exprs, ids=list(range(len(exprs))), elements=len(exprs), flags=[0] * len(exprs)
    )
    return db


def _escape(literal: str) -> str:
    """A literal as a Hyperscan (PCRE-syntax) pattern over its UTF-8 bytes."""
    return "".join(
        c if c.isascii() and c.isalnum() else f"\\x{b:02x}" for c in literal for b in c.encode()
    )


def _hs_chunks(
    path: str | Path,
    literals: tuple[str, ...],
    follow: tuple[str, ...] | None,
    gzipped: bool,
    start_byte: int,
    start_line: int,
    block_bytes: int,
    live_since: float | None = None,
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
    bitmaps: dict[str, np.ndarray] = {}  # the newline bitmap's arrays, reused block after block
    for buf, body_len, real_len in _blocks(path, gzipped, start_byte, block_bytes, live_since):
        ends.clear()
        follow_ends.clear()
        db.scan(memoryview(buf)[:body_len], match_event_handler=on_match, scratch=scratch)
        offset += real_len
        follows = follow_ends if follow else None
        chunk, prev_follow = block_candidates(
            buf, body_len, ends, follows, line_no, offset, prev_follow, bitmaps
        )
        line_no += chunk.n_lines
        yield chunk


def _blocks(
    path: str | Path,
    gzipped: bool,
    start_byte: int,
    block_bytes: int,
    live_since: float | None = None,
) -> Iterator[tuple[bytearray, int, int]]:
    """(buffer, body length, bytes of the file in the body): ``buf[:body]`` is whole lines, each
    ending in ``\\n`` (one is added after a last line without it).

    One buffer is read into again and again (a fresh 64 MiB ``bytes`` per block costs more in page
    faults than the scan): what is yielded is only valid until the next block is asked for.
    """
    with reader.lines_from(path, gzipped, start_byte, live_since) as f:
        yield from _fill(f, block_bytes)


def _fill(f: Any, block_bytes: int) -> Iterator[tuple[bytearray, int, int]]:
    buf = bytearray(block_bytes + 1)  # + 1: room for the newline after a last line without one
    view = memoryview(buf)
    kept = 0  # bytes of a partial line carried to the front of the buffer
    while True:
        got = f.readinto(view[kept : len(buf) - 1])
        size = kept + got
        if got == 0:
            if kept:
                buf[kept] = 10
                yield buf, kept + 1, kept
            return
        cut = buf.rfind(b"\n", 0, size) + 1
        if cut == 0:  # a line longer than the buffer: grow it and read on
            reader.check_line_bytes(size)
            view.release()
            buf.extend(bytes(len(buf)))
            view, kept = memoryview(buf), size
            continue
        yield buf, cut, cut
        buf[: size - cut] = view[cut:size]
        kept = size - cut


class NewlineBits:
    """The ``\\n`` bytes of a block as a bitmap (bit ``j`` of word ``w`` is byte ``64 w + j``)
    with running counts per word: the line count, line numbers and line starts of chosen lines,
    without listing every newline. Built in ``SUB_BYTES`` pieces (the byte mask stays in cache).
    ``scratch``: arrays kept from the previous block, reused (fresh ones of a block's size cost
    page faults every block); the bitmap is then only valid until the next block's."""

    def __init__(self, data: np.ndarray, scratch: dict[str, np.ndarray] | None = None) -> None:
        n_words = (len(data) + 63) // 64
        self.words = _array(scratch, "words", n_words, np.uint64)
        self.words[-1:] = 0  # the bytes past the data in the last word
        packed = self.words.view(np.uint8)
        sub = max(64, SUB_BYTES // 64 * 64)  # whole words per piece
        mask = _array(scratch, "mask", min(sub, len(data)), np.bool_)
        for k in range(0, len(data), sub):
            piece = data[k : k + sub]
            m = mask[: len(piece)]
            np.equal(piece, 10, out=m)
            packed[k // 8 : k // 8 + (len(piece) + 7) // 8] = np.packbits(m, bitorder="little")
        self.counts = np.bitwise_count(self.words, out=_array(scratch, "counts", n_words, np.uint8))
        # newlines up to the end of each word
        self.cum = np.cumsum(
            self.counts, dtype=np.int64, out=_array(scratch, "cum", n_words, np.int64)
        )
        self.total = int(self.cum[-1]) if n_words else 0

    def before(self, pos: np.ndarray) -> np.ndarray:
        """How many newlines lie before each offset ``pos`` (the 0-based line index there)."""
        w = pos >> 6
        return self.cum[w] - self.counts[w] + np.bitwise_count(self.words[w] & _below(pos))

    def line_starts(self, nl_pos: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """Start offsets of the lines ending at newlines ``nl_pos`` (line indexes ``idx``)."""
        w = nl_pos >> 6
        word = self.words[w] & _below(nl_pos)
        far = word == 0  # the previous newline is in an earlier word: the last one of that word
        if far.any():
            prev_w = np.searchsorted(self.cum, idx[far], side="left")  # word of newline idx - 1
            first = idx[far] == 0
            w = w.copy()
            w[far] = np.where(first, 0, prev_w)
            word[far] = np.where(first, 0, self.words[np.minimum(prev_w, len(self.words) - 1)])
        return (w << 6) + _high_bit(word) + 1  # 0 for the first line (w = 0, no bit)


def _array(scratch: dict[str, np.ndarray] | None, name: str, size: int, dtype: type) -> np.ndarray:
    """An uninitialized array of ``size``: ``scratch[name]`` (grown when too small) if given."""
    if scratch is None:
        return np.empty(size, dtype)
    kept = scratch.get(name)
    if kept is None or len(kept) < size:
        kept = scratch[name] = np.empty(size, dtype)
    return kept[:size]


def _below(pos: np.ndarray) -> np.ndarray:
    """Masks of the bits below bit ``pos % 64``."""
    return (np.uint64(1) << (pos & 63).astype(np.uint64)) - np.uint64(1)


def _high_bit(x: np.ndarray) -> np.ndarray:
    """Index of the highest set bit of each word (-1 for 0)."""
    x = x.copy()
    for shift in (1, 2, 4, 8, 16, 32):
        x |= x >> np.uint64(shift)
    return np.bitwise_count(x).astype(np.int64) - 1


def block_candidates(
    buf: bytes | bytearray,
    body_len: int,
    ends: Sequence[int],
    follow_ends: Sequence[int] | None,
    first_line: int,
    end_byte: int,
    prev_follow: bool,
    scratch: dict[str, np.ndarray] | None = None,
) -> tuple[CandidateChunk, bool]:
    """The candidates of one block of whole lines, given the end offsets of its lines holding a
    literal (and of those holding the ``follow`` literal). Also returns whether the block's last
    line holds ``follow`` (its successor, in the next block, is then a candidate). ``scratch``:
    see ``NewlineBits``."""
    data = np.frombuffer(buf, np.uint8, count=body_len)
    bits = NewlineBits(data, scratch)
    too_long, long_ends = _too_long(buf, body_len, bits, first_line)
    cand_ends = _unique_ends(ends, long_ends)
    follows, next_follow = None, False
    if follow_ends is not None:
        holder = _unique_ends(follow_ends, long_ends)
        next_follow = bool(len(holder)) and int(holder[-1]) == body_len
        after = _following(buf, data, body_len, holder, prev_follow, long_ends)
        if len(after):
            cand_ends = np.union1d(cand_ends, after)
            follows = np.isin(cand_ends, after)
        else:
            follows = np.zeros(len(cand_ends), np.bool_)
    nl_pos = cand_ends - 1
    idx = bits.before(nl_pos)
    start = bits.line_starts(nl_pos, idx)
    columns: dict[str, Any] = {
        "line": pl.Series("line", idx + first_line, dtype=pl.Int64),
        "raw": _texts(buf, start, _stops(data, start, nl_pos)),
    }
    if follows is not None:
        columns["follows"] = pl.Series("follows", follows, dtype=pl.Boolean)
    chunk = CandidateChunk(pl.DataFrame(columns), first_line, bits.total, end_byte, too_long)
    return chunk, next_follow


def _unique_ends(ends: Sequence[int], long_ends: np.ndarray) -> np.ndarray:
    """Sorted unique line ends (offsets just past the newline), over-long lines left out."""
    if not len(ends):
        return np.empty(0, np.int64)
    out = np.asarray(ends, np.int64)
    if len(out) > 1 and not (out[1:] > out[:-1]).all():  # Hyperscan reports ends in order
        out = np.unique(out)
    if len(long_ends):
        out = out[~np.isin(out, long_ends)]
    return out


def _following(
    buf: bytes | bytearray,
    data: np.ndarray,
    body_len: int,
    holder: np.ndarray,
    prev_follow: bool,
    long_ends: np.ndarray,
) -> np.ndarray:
    """Ends of the lines after the ``follow`` holders (``holder``: their ends) that are neither
    empty nor over-long; with ``prev_follow``, the block's first line too."""
    starts = holder[holder < body_len].tolist()
    if prev_follow:
        starts.insert(0, 0)
    if not starts:
        return np.empty(0, np.int64)
    find = buf.find
    ends = np.array([find(b"\n", s, body_len) + 1 for s in starts], np.int64)
    start = np.asarray(starts, np.int64)
    keep = _stops(data, start, ends - 1) > start  # an empty line is no candidate
    if len(long_ends):
        keep &= ~np.isin(ends, long_ends)
    return ends[keep]


def _stops(data: np.ndarray, start: np.ndarray, nl_pos: np.ndarray) -> np.ndarray:
    """(Exclusive) stop offsets of lines: their newline, one ``\\r`` before it dropped."""
    return nl_pos - ((nl_pos > start) & (data[np.maximum(nl_pos - 1, 0)] == 13))


def _too_long(
    buf: bytes | bytearray, body_len: int, bits: NewlineBits, first_line: int
) -> tuple[pl.DataFrame | None, np.ndarray]:
    """Lines longer than ``MAX_LINE_BYTES`` once decoded (a replaced byte grows to 3), and their
    ends. Only lines of more than a third of the limit are decoded to tell: such a line holds a
    multiple of ``limit``, so probing at those offsets finds them all."""
    limit = MAX_LINE_BYTES // 3
    rows = []
    pos = 0
    while pos < body_len:
        start = buf.rfind(b"\n", 0, pos) + 1
        end = buf.find(b"\n", pos, body_len) + 1
        if end - start > limit:
            stop = end - 1 - (end - 1 > start and buf[end - 2] == 13)
            text = bytes(buf[start:stop]).decode("utf-8", "replace")
            nbytes = len(text.encode())
            if nbytes > MAX_LINE_BYTES:
                rows.append((end, nbytes, text[:RAW_KEEP_CHARS]))
        pos = max(pos + limit, end)
    if not rows:
        return None, np.empty(0, np.int64)
    ends = np.array([r[0] for r in rows], np.int64)
    frame = pl.DataFrame(
        {
            "line": bits.before(ends - 1) + first_line,
            "bytes": [r[1] for r in rows],
            "raw": [r[2] for r in rows],
        },
        schema=_LONG_SCHEMA,
    )
    return frame, ends


def _texts(buf: bytes | bytearray, starts: np.ndarray, stops: np.ndarray) -> pl.Series:
    """``buf[start:stop]`` for each pair, as a String series (invalid UTF-8 replaced).

    The pairs are sorted and disjoint, so ``start0, stop0, start1, stop1, ...`` is a valid offsets
    buffer over ``buf``: the lines are its even elements, taken in one copy."""
    k = len(starts)
    if k == 0:
        return pl.Series("raw", [], dtype=pl.String)
    offsets = np.empty(2 * k + 1, np.int64)
    offsets[0 : 2 * k : 2] = starts
    offsets[1 : 2 * k : 2] = stops
    offsets[2 * k] = stops[-1]
    view = pa.Array.from_buffers(
        pa.large_binary(), 2 * k, [None, pa.py_buffer(offsets), pa.py_buffer(buf)]
    )
    # (``pa.array`` of a numpy array would import pandas: the indexes are wrapped instead)
    even = pa.Array.from_buffers(pa.int64(), k, [None, pa.py_buffer(np.arange(0, 2 * k, 2))])
    lines = view.take(even)
    try:
        text = pc.cast(lines, pa.large_string())
    except pa.ArrowInvalid:  # invalid UTF-8 somewhere: decode these lines as the reader does
        return pl.Series(
            "raw", [b.decode("utf-8", "replace") for b in lines.to_pylist()], dtype=pl.String
        )
    return pl.Series("raw", pl.from_arrow(text), dtype=pl.String)


# -- the polars engine (no Hyperscan) --------------------------------------------------------------


def _polars_chunks(
    path: str | Path,
    literals: tuple[str, ...],
    follow: tuple[str, ...] | None,
    gzipped: bool,
    start_byte: int,
    start_line: int,
    block_bytes: int,
    live_since: float | None = None,
) -> Iterator[CandidateChunk]:
    pattern = "|".join(re.escape(lit) for lit in literals)
    line_no, offset, prev_follow = start_line, start_byte, False
    for lines, body_len in reader._raw_chunks(path, gzipped, start_byte, block_bytes, live_since):
        offset += body_len
        chunk = reader._candidates(lines, line_no, offset, pattern)
        if follow is not None:
            chunk, prev_follow = _with_follows(chunk, lines, follow, prev_follow)
        line_no += lines.len()
        yield chunk


def _with_follows(
    chunk: CandidateChunk, lines: pl.Series, follow: tuple[str, ...], prev_follow: bool
) -> tuple[CandidateChunk, bool]:
    n = lines.len()
    cand = chunk.cand
    idx = cand["line"] - chunk.first_line
    holder = idx.filter(cand["raw"].str.contains("|".join(re.escape(lit) for lit in follow)))
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
    cand = pl.DataFrame(
        {
            "line": pl.Series(all_idx + chunk.first_line, dtype=pl.Int64),
            "raw": lines.gather(all_idx),
            "follows": pl.Series(np.isin(all_idx, after), dtype=pl.Boolean),
        }
    )
    return _replace(chunk, cand), next_follow


def _replace(chunk: CandidateChunk, cand: pl.DataFrame) -> CandidateChunk:
    return CandidateChunk(cand, chunk.first_line, chunk.n_lines, chunk.end_byte, chunk.too_long)


__all__ = ["BLOCK_BYTES", "NewlineBits", "available", "block_candidates", "iter_scan"]

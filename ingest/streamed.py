"""Whole-file documents read as streams: the line census and the streamed feed of a parser.

A parser with ``parse_stream`` (Prometheus range exports, ``sacct --json``) reads a big document
from its bytes with bounded memory; the line census counts the file's lines from its bytes, a
window at a time, so that every line is accounted for without holding the lines.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from faultlens.ingest.base import RAW_KEEP_CHARS, ChunkResult, quarantine_frame
from faultlens.ingest.reader import _open_stream, iter_chunks

STREAM_WINDOW_BYTES = 4 << 20  # bytes read at once by the line census of a streamed document
# Rows of a streamed document buffered before they are spilled to Parquet parts: the sink's own
# limit (``pipeline.SPILL_ROWS``, 250k rows a table) held a fixed ~60 MiB of a 200 MB export's
# peak (``bench/bench_prom_stream.py``).
STREAM_SPILL_ROWS = 50_000


@dataclass(frozen=True)
class Census:
    """A file's lines counted from its bytes: all, non-empty, and the first non-empty one."""

    lines: int
    content: int
    first_content: int | None
    end_byte: int


def line_census(path: str, gzipped: bool, start_line: int = 1) -> Census:
    """Count the lines of ``path`` as the reader splits them (on ``\\n``; one ``\\r`` before it
    dropped) a window of ``STREAM_WINDOW_BYTES`` at a time: how many, how many are not empty,
    and the first non-empty one's number."""
    lines = content = 0
    first: int | None = None
    run = 0  # bytes of the current line so far
    prev_cr = False  # the current line's last byte so far is ``\\r``
    end = 0
    with _open_stream(path, gzipped) as f:
        while window := f.read(STREAM_WINDOW_BYTES):
            end += len(window)
            buf = np.frombuffer(window, dtype=np.uint8)
            nl = np.flatnonzero(buf == 10)
            if len(nl):
                starts = np.concatenate(([0], nl[:-1] + 1))
                length = nl - starts
                length[0] += run
                ends_cr = np.zeros(len(nl), dtype=bool)
                inside = nl > 0
                ends_cr[inside] = buf[nl[inside] - 1] == 13
                ends_cr[~inside] = prev_cr
                empty = (length == 0) | ((length == 1) & ends_cr)
                if first is None and not empty.all():
                    first = start_line + lines + int(np.argmin(empty))
                content += int((~empty).sum())
                lines += len(nl)
                tail = buf[nl[-1] + 1 :]
                run, prev_cr = len(tail), bool(len(tail)) and tail[-1] == 13
            else:
                run += len(buf)
                prev_cr = bool(buf[-1] == 13)
    if run:  # a last line without its ``\\n``
        if not (run == 1 and prev_cr):
            first = start_line + lines if first is None else first
            content += 1
        lines += 1
    return Census(lines, content, first, end)


def streams(task: Any, parser: Any) -> bool:
    """Whether ``parser`` reads this file as a stream (a big whole-file document read from its
    start) rather than as its lines."""
    if not hasattr(parser, "parse_stream") or task.start_byte or task.live_since is not None:
        return False
    return bool(parser.streams(task.size, read_head_bytes(task.path, task.gzipped, 4096)))


def read_head_bytes(path: str, gzipped: bool, n: int) -> bytes:
    with _open_stream(path, gzipped) as f:
        return f.read(n)


def _spilled(sink: Any, results: Iterable[ChunkResult]) -> None:
    """Add ``results`` to ``sink``, spilling its buffers to Parquet every ``STREAM_SPILL_ROWS``
    rows (``close`` writes the buffered rows; the sink takes more after it)."""
    pending = 0
    for result in results:
        sink.add(result)
        pending += sum(frame.height for frame in result.tables.values())
        if pending >= STREAM_SPILL_ROWS:
            sink.close()
            pending = 0


def feed_stream(task: Any, parser: Any, state: Any, sink: Any) -> tuple[int, int]:
    """The streamed path of a whole-file document: the parser reads the bytes (bounded memory),
    the line census counts the lines. Every non-empty line belongs to the document (blank ones
    are noise, as in the whole-document read): all are parsed, or all quarantined with the
    reason when the parser rejects the document."""
    census = line_census(task.path, task.gzipped, task.start_line)
    if census.content == 0:
        return census.lines, census.end_byte
    restart = getattr(parser, "stream_restart", None)
    try:
        try:
            _spilled(
                sink, parser.parse_stream(task.path, task.gzipped, census.first_content, task.ctx)
            )
        except Exception as e:
            if restart is None or not isinstance(e, restart):
                raise
            sink.discard()  # a layout the fast stream does not validate: the exact one decides
            _spilled(
                sink,
                parser.parse_stream(
                    task.path, task.gzipped, census.first_content, task.ctx, exact=True
                ),
            )
    except (ValueError, TypeError, KeyError, OverflowError, RecursionError) as e:
        sink.discard()
        what = getattr(parser, "rejected", None)
        reason = (f"{what}: {e}" if what else str(e))[:500]  # the whole read's reason
        for chunk in iter_chunks(task.path, gzipped=task.gzipped, start_line=task.start_line):
            idx = (chunk.lines.is_not_null() & (chunk.lines != "")).fill_null(False).arg_true()
            if idx.len():
                raw = chunk.lines.gather(idx).str.slice(0, RAW_KEEP_CHARS).to_list()
                lines = (idx + chunk.first_line).to_list()
                sink.add(ChunkResult(quarantine=quarantine_frame(lines, raw, [reason] * len(raw))))
        return census.lines, census.end_byte
    sink.add(ChunkResult(parsed=census.content))
    return census.lines, census.end_byte

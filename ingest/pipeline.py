"""Ingesting files: planning (exactly-once), parsing (anywhere), loading (one transaction per file).

The three steps are separate so that parsing can run in a process pool or on a Dask worker:

1. ``plan`` looks the file up in ``ingested_files``: unchanged (skip), grown (read from the byte
   where the last run stopped), rotated or new (read from the start).
2. ``parse_file`` streams the file in chunks through its parser and spills each table's rows to
   Parquet parts in a scratch folder, partitioned as the Parquet lake is (``events/source=kernel/
   day=2026-01-03/part-00000.parquet``); it touches no database, so it can run in any process.
3. ``load`` inserts the parts, the quarantined lines and the registry row in one transaction:
   after a crash or Ctrl-C the database holds all of a file or none of it.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import tempfile
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from glob import glob
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from faultlens.ingest import registry
from faultlens.ingest.base import ChunkResult, ParseContext, normalize_node
from faultlens.ingest.errors import InputError, StoreError
from faultlens.ingest.lake import DAY_COLUMN, partition_columns
from faultlens.ingest.reader import (
    MAX_LINE_BYTES,
    CandidateChunk,
    Chunk,
    file_head,
    in_thread,
    iter_candidates,
    iter_chunks,
    prefix_fingerprint,
    read_head_text,
    tail_fingerprint,
)
from faultlens.ingest.schema import TELEMETRY_SOURCE, conform
from faultlens.ingest.store import LOAD_MEMORY, Store
from faultlens.ingest.streamed import feed_stream, streams
from faultlens.ingest.zones import zone_for_path

log = logging.getLogger(__name__)

# File names that say nothing about the node: their node is the folder they sit in.
_GENERIC_NAMES = re.compile(
    r"^(kern|syslog|messages|dmesg|kmsg|journal|journalctl|slurmd|nccl|pytorch|train|"
    r"nvidia-smi|dcgm|metrics|console|daemon)([._-].*)?$"
)


@dataclass
class FileReport:
    path: str
    status: str  # ok | partial | failed | unchanged
    format: str | None = None
    lines: int = 0
    parsed: int = 0
    noise: int = 0
    quarantined: int = 0
    error: str | None = None
    warning: str | None = None  # e.g. the format was not recognized (scanned for known messages)
    events_no_ts: int = 0  # the file's events without a wall-clock time (kept, flagged)
    events_no_node: int = 0  # ... and without a node (no evidence named one)
    zone: str | None = None  # the zone its zone-less stamps were read in (--tz / --tz-path)
    bytes_read: int = 0
    rows: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("bytes_read")
        return d


@dataclass
class FileTask:
    """What to parse: a file, where to start, and its context."""

    path: str
    fmt: str | None
    ctx: ParseContext
    fingerprint: str
    head_len: int
    size: int
    gzipped: bool
    start_byte: int = 0
    start_line: int = 1
    prior: dict[str, int] = field(default_factory=dict)  # counts of the part already ingested
    boot_time: datetime | None = None
    live_since: float | None = None  # a file modified at or after this epoch second is live
    reparse: bool = False  # replace the rows an earlier ingest of this path left


@dataclass
class ParsedFile:
    task: FileTask
    fmt: str
    lines: int
    parsed: int
    quarantined: int
    end_byte: int
    parts: dict[str, list[str]]  # table -> parquet files
    quarantine_parts: list[str]
    boot_time: datetime | None
    scratch: str
    warning: str | None = None
    noise: int = 0
    partition: Partition | None = None  # the checked line sets, when the parser reports them


def expand_paths(paths: Iterable[str], *, follow_symlinks: bool = False) -> list[str]:
    """Files, folders (recursively) and glob patterns -> sorted unique file paths.

    Inside a folder, a symlink that leads out of it (to ``/etc/shadow``, another user's home) is
    not followed, with a warning, unless ``follow_symlinks``; files named themselves are read."""
    out: list[str] = []
    for p in paths:
        matches = glob(p, recursive=True) if any(c in p for c in "*?[") else [p]
        if not matches:
            out.append(p)  # reported later as unreadable
        for m in matches:
            mp = Path(m)
            if mp.is_dir():
                out.extend(_folder_files(mp, follow_symlinks))
            else:
                out.append(str(mp))
    seen: set[str] = set()
    unique = []
    for p in out:
        key = str(Path(p).resolve()) if Path(p).exists() else p
        if key not in seen:
            seen.add(key)
            unique.append(p)
    return unique


def _folder_files(folder: Path, follow_symlinks: bool) -> list[str]:
    root = folder.resolve()
    found: list[Path] = []
    for dirpath, _dirs, names in os.walk(folder, followlinks=follow_symlinks):
        for name in names:
            f = Path(dirpath) / name
            if not f.is_file():
                continue
            if not follow_symlinks and not f.resolve().is_relative_to(root):
                log.warning(
                    "not reading %s: a symlink out of %s (--follow-symlinks to read it)", f, folder
                )
                continue
            found.append(f)
    return [str(f) for f in sorted(found)]


def _place_node(ctx: ParseContext, path: str) -> None:
    """The node for lines that name none: ``--node``, else what ``--node-from-path`` finds in the
    path, else none (a folder name is never taken for a node by default)."""
    if ctx.node is not None:
        ctx.node = normalize_node(ctx.node)
        ctx.node_origin = ctx.node_origin or "option"
        return
    if ctx.node_pattern:
        m = re.search(ctx.node_pattern, path)
        if m:
            groups = m.groupdict()
            ctx.node = normalize_node(groups["node"] if "node" in groups else m.group(m.re.groups))
            ctx.node_origin = "path" if ctx.node else None


def _place_zone(ctx: ParseContext, path: str) -> None:
    """The zone of this file's zone-less stamps: its ``--tz-path`` zone, else ``--tz``."""
    if ctx.options and ctx.options.get("tz_paths"):  # a copy: the base context's stays whole
        zone = zone_for_path(path, ctx.options)
        rest = {k: v for k, v in ctx.options.items() if k not in ("tz", "tz_paths")}
        ctx.options = rest | ({"tz": zone} if zone else {})


def infer_node(path: str) -> str | None:
    """The node a per-node log's folder suggests when its file name is a generic one (a hint to
    show, never applied: pass ``--node`` or ``--node-from-path``).

    A folder that holds a job's logs (``jobs/<id>/``, or a numeric Slurm job id) is not a node.
    """
    p = Path(path)
    if _GENERIC_NAMES.match(p.name.lower()) and infer_job(path) is None:
        parent = p.parent.name.lower()
        return parent if _HOST_LIKE.match(parent) and parent not in _NOT_NODES else None
    return None


# A folder that can name a host holds a digit (``gpu0042``, ``node-17``, ``ip-10-0-0-1``): a
# folder of one source's logs (``nccl/``, ``telemetry/``, ``misc/``) is never suggested.
_HOST_LIKE = re.compile(r"^[a-z0-9][a-z0-9._-]*[0-9][a-z0-9._-]*$")


# Folder names that hold logs but name no node (``/var/log/kern.log``).
_NOT_NODES = {".", "/", "log", "logs", "var", "tmp", "data", "journal", "input", "raw"}
_JOB_ID = re.compile(r"^[0-9]+(?:_[0-9]+)?(?:\.[0-9a-z]+)?$")
_SLURM_OUTPUT = re.compile(r"^slurm-(?P<job>[0-9]+(?:_[0-9]+)?)\.(?:out|err)(?:\.gz)?$")


def infer_job(path: str) -> str | None:
    """The job a per-job log belongs to: its folder under ``jobs/``, a Slurm-job-id folder, or
    the name Slurm gives a batch job's output by default (``slurm-%j.out``, and
    ``slurm-%A_%a.out`` for an array task)."""
    parent = Path(path).parent
    if parent.parent.name == "jobs" or _JOB_ID.match(parent.name):
        return parent.name
    m = _SLURM_OUTPUT.match(Path(path).name)
    return m["job"] if m else None


def plan(
    store: Store,
    path: str,
    *,
    fmt: str | None = None,
    base_ctx: ParseContext | None = None,
    reparse: bool = False,
) -> FileTask | FileReport:
    """How to ingest ``path``: a ``FileTask``, or a ``FileReport`` if there is nothing to do.

    With ``reparse`` the file is read from the start whatever was ingested of it before, and
    loading it replaces that file's rows (with a corrected ``--node`` / ``--boot-time``)."""
    abspath = str(Path(path).resolve()) if Path(path).exists() else path
    try:
        if not Path(path).is_file():
            raise InputError(f"{path}: no such file")
        head = file_head(path)
    except InputError as e:
        return FileReport(path=abspath, status="failed", error=str(e))
    mtime = datetime.fromtimestamp(Path(path).stat().st_mtime, UTC).replace(tzinfo=None)
    ctx = ParseContext(file=abspath, mtime=mtime)
    if base_ctx is not None:
        ctx = ParseContext(
            **{**asdict(base_ctx), "file": abspath, "mtime": base_ctx.mtime or mtime}
        )
    _place_node(ctx, abspath)
    _place_zone(ctx, abspath)
    if ctx.job_id is None:
        ctx.job_id = infer_job(abspath)
    task = FileTask(abspath, fmt, ctx, head.fingerprint, head.head_len, head.size, head.gzipped)
    if reparse:
        task.reparse = True
        return task
    for rec in store.files_matching(abspath, head.fingerprint).iter_rows(named=True):
        if rec["status"] == "failed" or not _same_content(path, head, rec):
            continue  # another file, or a rotated / truncated one: read from the start
        if head.size == rec["bytes"]:
            return FileReport(
                path=abspath,
                status="unchanged",
                format=rec["format"],
                lines=rec["lines"],
                parsed=rec["parsed"],
                noise=rec["noise"],
                quarantined=rec["quarantined"],
            )
        if head.gzipped:
            continue  # a .gz is never appended to: a different size is a different file
        task.fmt = task.fmt or rec["format"]
        task.start_byte = rec["bytes"]
        task.start_line = rec["lines"] + 1
        task.prior = {k: rec[k] for k in ("lines", "parsed", "noise", "quarantined")}
        task.fingerprint, task.head_len = rec["fingerprint"], rec["head_len"]
        task.boot_time = rec.get("boot_time")
        break
    return task


def _same_content(path: str, head: Any, rec: dict[str, Any]) -> bool:
    """Whether ``path`` holds what registry row ``rec`` ingested, possibly grown since.

    The first ``head_len`` bytes and the ``HEAD_BYTES`` before the stored end must both match.
    """
    if head.size < rec["bytes"]:
        return False
    same_start = rec["fingerprint"] == head.fingerprint or (
        rec["head_len"] <= head.size
        and prefix_fingerprint(path, rec["head_len"]) == rec["fingerprint"]
    )
    if not same_start:
        return False
    if rec.get("tail_fingerprint") is None:
        return rec["path"] == str(Path(path).resolve())
    return tail_fingerprint(path, rec["bytes"]) == rec["tail_fingerprint"]


SNIFF_LINE_CHARS = 2048
UNRECOGNIZED = "format not recognized, scanned for known messages"


def sniff_format(task: FileTask) -> tuple[str, str | None]:
    """The parser for a file and a warning: a document format (JSON, CSV, XML, Prometheus text,
    sacct tables, ...) by its sniffer; any line-oriented log, and a file no sniffer recognizes,
    is read by ``lines`` (every family's messages). Raises ``InputError`` for binary input."""
    head = read_head_text(task.path, task.gzipped)
    # a line's start is enough to recognize it; a hostile 64 KiB line would keep the sniffers'
    # regular expressions busy for minutes
    lines = [line[:SNIFF_LINE_CHARS] for line in head.splitlines()[:400]]
    name, score = registry.sniff(lines, task.path)
    if name is None or score <= 0:
        return registry.FALLBACK, UNRECOGNIZED
    return registry.reader_for(name), None


PREPARE_IN_THREAD = True  # a parser's ``prepare_candidates`` in a thread of its own
SCAN_BLOCK_BYTES: int | None = None  # bytes per raw-scan block (None: ``scan.BLOCK_BYTES``)
SPILL_ROWS = 250_000  # rows of a table buffered before a Parquet part is written
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"  # a row without a timestamp (or source)


class _Sink:
    """Collects a parser's chunk results and spills them to few, large Parquet parts."""

    def __init__(self, scratch: str, ctx: ParseContext | None = None) -> None:
        self.scratch = scratch
        self.ctx = ctx
        self.parts: dict[str, list[str]] = {}
        self.qparts: list[str] = []
        self.parsed = self.quarantined = 0
        self.boot_time: datetime | None = None
        # the line numbers behind the counts (None once a parser does not report its own)
        self.parsed_lines: list[pl.Series] | None = []
        self.quarantine_lines: list[pl.Series] = []
        self._buf: dict[str, list[pl.DataFrame]] = {}
        self._rows: dict[str, int] = {}
        self._k = 0

    def add(self, result: ChunkResult) -> None:
        self.parsed += result.parsed
        self.boot_time = self.boot_time or result.boot_time
        known = result.known_lines()
        if known is None or self.parsed_lines is None:
            self.parsed_lines = None
        elif known.len():
            self.parsed_lines.append(known)
        for table, frame in result.tables.items():
            if frame.height:
                frame = conform(table, frame)
                if table == "events" and self.ctx is not None:
                    frame = with_node_source(frame, self.ctx)
                self._buf.setdefault(table, []).append(frame)
                self._rows[table] = self._rows.get(table, 0) + frame.height
                if self._rows[table] >= SPILL_ROWS:
                    self._flush(table)
        if result.quarantine is not None and result.quarantine.height:
            self._buf.setdefault("quarantine", []).append(result.quarantine)
            self.quarantined += result.quarantine.height
            self.quarantine_lines.append(result.quarantine["line"])

    def _flush(self, table: str) -> None:
        frames = self._buf.pop(table, [])
        self._rows.pop(table, None)
        if not frames:
            return
        frame = pl.concat(frames, how="vertical_relaxed") if len(frames) > 1 else frames[0]
        out = self.qparts if table == "quarantine" else self.parts.setdefault(table, [])
        for keys, part in partitions(table, frame):
            folder = Path(self.scratch, table, *keys)
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"part-{self._k:05d}.parquet"
            self._k += 1
            part.write_parquet(path, compression="uncompressed", statistics=False)
            out.append(str(path))

    def close(self) -> None:
        for table in list(self._buf):
            self._flush(table)

    def discard(self) -> None:
        """Forget every row added so far (a streamed document rejected part-way)."""
        for path in [p for ps in self.parts.values() for p in ps] + self.qparts:
            Path(path).unlink(missing_ok=True)
        self.parts, self.qparts, self._buf, self._rows = {}, [], {}, {}
        self.parsed = self.quarantined = 0
        self.parsed_lines, self.quarantine_lines = [], []


def with_node_source(events: pl.DataFrame, ctx: ParseContext) -> pl.DataFrame:
    """``node_source`` for events whose parser left it unset: ``line`` when the file named the
    node, ctx's origin (``option`` / ``path``) when it is the context's fallback node."""
    node = pl.col("node")
    source: Any = pl.when(node.is_null()).then(pl.lit(None, pl.String))
    if ctx.node is not None:
        source = source.when(node == ctx.node).then(pl.lit(ctx.node_origin or "option"))
    return events.with_columns(
        node_source=pl.coalesce(pl.col("node_source"), source.otherwise(pl.lit("line")))
    )


def partitions(table: str, frame: pl.DataFrame) -> Iterator[tuple[tuple[str, ...], pl.DataFrame]]:
    """``frame`` split as the Parquet lake partitions ``table`` (``ingest.lake``): by ``source``
    and UTC day of its time column, as hive folder names (``source=kernel``, ``day=2026-01-03``);
    tables without a time column stay whole."""
    keys = partition_columns(table)
    if not keys or frame.height == 0:
        yield (), frame
        return
    by = [k if k == "source" else "_day" for k in keys]
    frame = frame.with_columns(pl.col(DAY_COLUMN[table]).dt.date().alias("_day"))
    for values, part in frame.partition_by(by, as_dict=True, maintain_order=True).items():
        names = tuple(
            f"{k}={NULL_PARTITION if v is None else v}" for k, v in zip(keys, values, strict=True)
        )
        yield names, part.drop("_day")


def _too_long(line: pl.Series, nbytes: pl.Series, raw: pl.Series) -> ChunkResult:
    frame = pl.DataFrame({"line": line.cast(pl.Int64), "raw": raw, "_n": nbytes}).select(
        "line",
        "raw",
        reason=pl.concat_str(
            [
                pl.lit("line too long ("),
                pl.col("_n").cast(pl.String),
                pl.lit(f" bytes > {MAX_LINE_BYTES})"),
            ]
        ),
    )
    return ChunkResult(quarantine=frame)


def _feed_lines(task: FileTask, parser: Any, state: Any, sink: _Sink) -> tuple[int, int]:
    """The general path: every line of every chunk goes to ``parse_chunk``."""
    n_lines, end_byte = 0, task.start_byte
    chunks: Iterable[Chunk] = iter_chunks(
        task.path,
        gzipped=task.gzipped,
        start_byte=task.start_byte,
        start_line=task.start_line,
        threaded=True,
        live_since=task.live_since,
    )
    if parser.whole_file:
        chunks = _one_chunk(chunks)
    for chunk in chunks:
        lines = chunk.lines
        nbytes = lines.str.len_bytes()
        # A JSON document (a one-line `curl` export) may be one huge line: such parsers declare
        # a larger ``max_line_bytes``.
        limit = getattr(parser, "max_line_bytes", MAX_LINE_BYTES)
        if (nbytes.max() or 0) > limit:
            too_long = (nbytes > limit).fill_null(False)
            idx = too_long.arg_true()
            sink.add(
                _too_long(
                    idx + chunk.first_line, nbytes.gather(idx), lines.gather(idx).str.slice(0, 4000)
                )
            )
            lines = pl.select(pl.when(too_long).then(None).otherwise(lines)).to_series()
        n_lines += chunk.lines.len()
        sink.add(parser.parse_chunk(lines, chunk.first_line, task.ctx, state))
        end_byte = chunk.end_byte
    return n_lines, end_byte


def _feed_candidates(task: FileTask, parser: Any, state: Any, sink: _Sink) -> tuple[int, int]:
    """The pre-filtered path: only lines with one of ``parser.prefilter`` reach the parser."""
    n_lines, end_byte = 0, task.start_byte
    if getattr(parser, "raw_scan", False):  # candidates found in the raw bytes (ingest.scan)
        from faultlens.ingest.scan import BLOCK_BYTES, iter_scan

        chunks = iter_scan(
            task.path,
            parser.prefilter,
            block_bytes=SCAN_BLOCK_BYTES or BLOCK_BYTES,
            follow=getattr(parser, "prefilter_follow", None),
            gzipped=task.gzipped,
            start_byte=task.start_byte,
            start_line=task.start_line,
            threaded=True,
            live_since=task.live_since,
        )
    else:
        chunks = iter_candidates(
            task.path,
            parser.prefilter,
            gzipped=task.gzipped,
            start_byte=task.start_byte,
            start_line=task.start_line,
            threaded=True,
            live_since=task.live_since,
        )
    prepare = getattr(parser, "prepare_candidates", None) if PREPARE_IN_THREAD else None
    if prepare is not None:  # a stateless first step: in a thread of its own, a chunk ahead
        carry = parser.new_carry() if hasattr(parser, "new_carry") else None
        chunks = in_thread(functools.partial(_prepared, chunks, prepare, task.ctx, carry), depth=2)
    for chunk in chunks:
        if chunk.too_long is not None:
            t = chunk.too_long
            sink.add(_too_long(t["line"], t["bytes"], t["raw"]))
        n_lines += chunk.n_lines
        if prepare is None:
            sink.add(parser.parse_candidates(chunk.cand, chunk.last_line, task.ctx, state))
        else:
            sink.add(parser.parse_prepared(chunk.cand, chunk.last_line, task.ctx, state))
        end_byte = chunk.end_byte
    return n_lines, end_byte


def _prepared(
    chunks: Iterable[CandidateChunk],
    prepare: Callable[..., pl.DataFrame],
    ctx: ParseContext,
    carry: Any = None,
) -> Iterator[CandidateChunk]:
    """``chunks`` with their candidates through the parser's ``prepare_candidates``; with a
    ``carry`` (``lines.PartialCarry``), the candidates it holds back at one chunk's end are
    prepared with the next chunk's (or, at the end, as a chunk of no lines of its own)."""
    last = None
    for c in chunks:
        cand = c.cand if carry is None else carry.take(c.cand, c.last_line)
        yield CandidateChunk(prepare(cand, ctx), c.first_line, c.n_lines, c.end_byte, c.too_long)
        last = c
    held = None if carry is None else carry.rest()
    if held is not None and last is not None:
        yield CandidateChunk(prepare(held, ctx), last.last_line + 1, 0, last.end_byte, None)


def uses_prefilter(parser: Any) -> bool:
    """Whether a parser takes the pre-filtered path (optional ``prefilter`` literals plus a
    ``parse_candidates`` method; see ``ingest.base``)."""
    return (
        bool(getattr(parser, "prefilter", None))
        and callable(getattr(parser, "parse_candidates", None))
        and not parser.whole_file
    )


class AccountingError(AssertionError):
    """A parser's line accounting does not add up (a bug in the parser, never in the input)."""


@dataclass(frozen=True)
class Partition:
    """A file part's lines ``first..last`` split into parsed, quarantined and noise."""

    parsed: np.ndarray  # sorted unique line numbers
    quarantined: np.ndarray
    first: int
    last: int

    @property
    def noise(self) -> int:
        return self.last - self.first + 1 - len(self.parsed) - len(self.quarantined)


def partition(
    parsed: Sequence[pl.Series], quarantined: Sequence[pl.Series], first: int, last: int
) -> Partition:
    """The parsed and quarantined line sets of lines ``first..last``, checked: no line twice in
    a set, none in both, none outside the range. Raises ``AccountingError`` otherwise."""
    sets = []
    for name, parts in (("parsed", parsed), ("quarantined", quarantined)):
        lines = np.sort(pl.concat(list(parts)).to_numpy()) if parts else np.empty(0, np.int64)
        unique = lines[np.r_[True, lines[1:] != lines[:-1]]] if len(lines) else lines
        if len(unique) != len(lines):
            raise AccountingError(f"{len(lines) - len(unique)} lines {name} twice")
        if len(unique) and (unique[0] < first or unique[-1] > last):
            raise AccountingError(f"{name} line outside {first}..{last}")
        sets.append(unique)
    both = np.intersect1d(sets[0], sets[1], assume_unique=True)
    if len(both):
        raise AccountingError(f"{len(both)} lines both parsed and quarantined (first {both[0]})")
    return Partition(sets[0], sets[1], first, last)


def parse_file(task: FileTask, scratch_root: str | None = None) -> ParsedFile:
    """Parse one file into Parquet parts in a scratch folder. Touches no database."""
    fmt, warning = (task.fmt, None) if task.fmt else sniff_format(task)
    if task.fmt is None and not task.gzipped:
        read_head_text(task.path, task.gzipped, 8192)  # binary check also for forced formats
    parser = registry.get(fmt)
    scratch = tempfile.mkdtemp(prefix="faultlens-", dir=scratch_root)
    sink = _Sink(scratch, task.ctx)
    state = parser.new_state(task.ctx)
    try:
        feed = (
            feed_stream
            if streams(task, parser)
            else _feed_candidates
            if uses_prefilter(parser)
            else _feed_lines
        )
        n_lines, end_byte = feed(task, parser, state, sink)
        sink.add(parser.finish(task.ctx, state))
        sink.close()
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    try:
        noise, lines_partition = _noise(sink, task.start_line, n_lines)
    except AccountingError as e:
        shutil.rmtree(scratch, ignore_errors=True)
        raise AccountingError(f"{task.path}: parser {fmt}: {e}") from None
    boot_time = task.ctx.boot_time or task.boot_time or sink.boot_time
    return ParsedFile(
        task,
        fmt,
        n_lines,
        sink.parsed,
        sink.quarantined,
        end_byte,
        sink.parts,
        sink.qparts,
        boot_time,
        scratch,
        warning,
        noise,
        lines_partition,
    )


def _noise(sink: _Sink, start_line: int, n_lines: int) -> tuple[int, Partition | None]:
    """The noise lines of a parsed part: from the line sets when the parser reports them (and
    checked; the partition is returned too), else what the counts leave over."""
    if sink.parsed_lines is None:
        if sink.parsed + sink.quarantined > n_lines:
            raise AccountingError(f"accounted {sink.parsed}+{sink.quarantined} of {n_lines} lines")
        return n_lines - sink.parsed - sink.quarantined, None
    part = partition(sink.parsed_lines, sink.quarantine_lines, start_line, start_line + n_lines - 1)
    if (len(part.parsed), len(part.quarantined)) != (sink.parsed, sink.quarantined):
        raise AccountingError(
            f"counts {sink.parsed} parsed / {sink.quarantined} quarantined, but line sets of "
            f"{len(part.parsed)} / {len(part.quarantined)}"
        )
    return part.noise, part


def _one_chunk(chunks: Iterable[Chunk]) -> list[Chunk]:
    """Concatenate all chunks of a file (for whole-file formats such as JSON documents)."""
    items = list(chunks)
    if not items:
        return []
    lines = pl.concat([c.lines for c in items]) if len(items) > 1 else items[0].lines
    return [Chunk(lines, items[0].first_line, items[-1].end_byte)]


def load(store: Store, pf: ParsedFile, *, now: datetime) -> FileReport:
    """Write a parsed file into the database in one transaction."""
    task = pf.task
    rows: dict[str, int] = {}
    try:
        with store.lowered_memory(LOAD_MEMORY), store.transaction():
            if task.reparse:
                store.forget_file(task.path)
            prior_no_ts, prior_no_node = store.file_summary(task.path)
            for table, files in pf.parts.items():  # events last: the rank map is in nccl_ranks
                if table != "events":
                    rows[table] = store.insert_parquet(table, files)
            if pf.parts.get("telemetry"):
                store.add_summary(
                    "telemetry",
                    task.path,
                    f"SELECT ? AS file, '{TELEMETRY_SOURCE}' AS source, NULL::VARCHAR AS kind, "
                    "node, count(*) AS n, count(*) FILTER (WHERE ts IS NULL) AS no_ts, "
                    "max(ts) AS last_ts FROM read_parquet(?, hive_partitioning = false) "
                    "GROUP BY ALL",
                    [task.path, pf.parts["telemetry"]],
                )
            if pf.parts.get("events"):
                rows["events"] = store.load_file_events(
                    task.path, pf.parts["events"], boot_time=pf.boot_time
                )
            if pf.quarantine_parts:
                store.insert_quarantine_parquet(task.path, pf.quarantine_parts)
            # Older rows of a grown file change only when they lack a time or a node and this
            # part brings a boot time or NCCL ranks; only then are they read again.
            older = (prior_no_ts and pf.boot_time is not None) or (
                prior_no_node and rows.get("nccl_ranks")
            )
            if older:
                if pf.boot_time is not None:
                    store.resolve_boot_relative(task.path, pf.boot_time)
                store.nodes_from_rank_map(task.path)
                store.resummarize_file(task.path)
            store.record_dataset(task.path, task.ctx.options.get("dataset"))
            no_ts, no_node = store.file_summary(task.path)
            prior = task.prior
            lines = prior.get("lines", 0) + pf.lines
            parsed = prior.get("parsed", 0) + pf.parsed
            quarantined = prior.get("quarantined", 0) + pf.quarantined
            noise = prior.get("noise", 0) + pf.noise
            status = "partial" if quarantined else "ok"
            end = pf.end_byte if not task.gzipped else task.size
            store.record_file(
                {
                    "path": task.path,
                    "fingerprint": task.fingerprint,
                    "head_len": task.head_len,
                    "bytes": end,
                    "tail_fingerprint": tail_fingerprint(task.path, end),
                    "lines": lines,
                    "parsed": parsed,
                    "noise": noise,
                    "quarantined": quarantined,
                    "format": pf.fmt,
                    "status": status,
                    "error": None,
                    "ingested_at": now,
                    "boot_time": pf.boot_time,
                }
            )
    finally:
        shutil.rmtree(pf.scratch, ignore_errors=True)
    return FileReport(
        path=task.path,
        status=status,
        format=pf.fmt,
        lines=pf.lines,
        parsed=pf.parsed,
        noise=pf.noise,
        quarantined=pf.quarantined,
        warning=pf.warning,
        events_no_ts=no_ts,
        events_no_node=no_node,
        zone=(task.ctx.options or {}).get("tz"),
        bytes_read=pf.end_byte - task.start_byte,
        rows=rows,
    )


def _parse_task(task: FileTask, scratch_root: str | None) -> ParsedFile | FileReport:
    """Worker entry point: a ParsedFile, or a failed FileReport with a one-line reason."""
    try:
        return parse_file(task, scratch_root)
    except InputError as e:
        return FileReport(path=task.path, status="failed", error=str(e))
    except MemoryError:
        return FileReport(path=task.path, status="failed", error=f"{task.path}: out of memory")
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:  # a parser bug (or a polars panic) must not stop the other files
        log.debug("parser crashed on %s:\n%s", task.path, traceback.format_exc())
        return FileReport(
            path=task.path, status="failed", error=f"{task.path}: internal error: {e!r}"
        )


@dataclass
class IngestReport:
    files: list[FileReport]

    @property
    def totals(self) -> dict[str, int]:
        keys = ("lines", "parsed", "noise", "quarantined", "events_no_ts", "events_no_node")
        t: dict[str, int] = {
            k: sum(getattr(f, k) for f in self.files if f.status != "unchanged") for k in keys
        }
        for status in ("ok", "partial", "failed", "unchanged"):
            t[status] = sum(1 for f in self.files if f.status == status)
        t["files"] = len(self.files)
        return t

    def to_json(self) -> dict[str, Any]:
        return {"files": [f.to_json() for f in self.files], "totals": self.totals}


def ingest_paths(
    store: Store,
    paths: Sequence[str],
    *,
    now: datetime,
    fmt: str | None = None,
    base_ctx: ParseContext | None = None,
    workers: int = 1,
    on_file: Callable[[FileReport], None] | None = None,
    executor: Any = None,
    scratch: str | None = None,
    follow_symlinks: bool = False,
    live_write_s: float = 0.0,
    reparse: bool = False,
) -> IngestReport:
    """Ingest files, folders and globs. ``executor``: any ``concurrent.futures``-style executor
    (a process pool or a Dask client) to parse in parallel; loading stays in this process.
    ``follow_symlinks``: see ``expand_paths``. ``live_write_s``: a plain file modified less than
    this long before ``now`` is still being written, and is read only to its last complete line
    (0: every file is read to its end)."""
    reports: list[FileReport] = []
    tasks: list[FileTask] = []
    live_since = now.replace(tzinfo=UTC).timestamp() - live_write_s if live_write_s > 0 else None
    for path in expand_paths(paths, follow_symlinks=follow_symlinks):
        planned = plan(store, path, fmt=fmt, base_ctx=base_ctx, reparse=reparse)
        if isinstance(planned, FileTask):
            planned.live_since = live_since
        if isinstance(planned, FileReport):
            reports.append(planned)
            if on_file:
                on_file(planned)
        else:
            tasks.append(planned)

    def finish(result: ParsedFile | FileReport) -> None:
        if isinstance(result, ParsedFile):
            try:
                report = load(store, result, now=now)
            except StoreError as e:
                report = FileReport(path=result.task.path, status="failed", error=str(e))
        else:
            report = result
        reports.append(report)
        if on_file:
            on_file(report)

    if executor is None and workers > 1 and len(tasks) > 1:
        from concurrent.futures import ProcessPoolExecutor
        from multiprocessing import get_context

        with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
            _run_all(pool, tasks, finish, scratch)
    elif executor is not None:
        _run_all(executor, tasks, finish, scratch)
    else:
        for task in tasks:
            finish(_parse_task(task, scratch))
    return IngestReport(reports)


def _run_all(
    executor: Any, tasks: list[FileTask], finish: Callable[[Any], None], scratch: str | None
) -> None:
    """Parse on ``executor`` (process pool or Dask client); load results in submission order.

    A Dask client retries a task whose worker died; each attempt parses into a fresh scratch
    folder, so a killed attempt can leave stray parts but never doubles rows.
    """
    if type(executor).__module__.startswith("distributed"):
        futures = [executor.submit(_parse_task, t, scratch, retries=2, pure=False) for t in tasks]
    else:
        futures = [executor.submit(_parse_task, t, scratch) for t in tasks]
    for fut in futures:
        finish(fut.result())

"""Docker's ``json-file`` log driver: one JSON record per line, every family read inside.

``/var/lib/docker/containers/<id>/<id>-json.log`` holds, per line a container wrote,
``{"log":"<the line with its \\n>","stream":"stdout|stderr","attrs":{...},"time":"<RFC 3339,
nanoseconds, UTC>"}`` (``attrs`` optional; the keys in that order, as moby's ``jsonlog`` writes
them). A line longer than the driver's buffer (16 KiB) is split into several records: only the
last piece's ``log`` ends with ``\\n``, and the pieces are joined again before the line is read.

Each logical line is read by the ``lines`` reader (kernel, NCCL / PyTorch, Slurm, Kubernetes)
as if a collector had written it as ``[<time>] <line>``: the record's ``time`` is the outer stamp
(``prefixes``' collector shape), and a stamp inside the message (glog, syslog, ``[rankN]:`` tags)
is read as the line reader reads it. The event's line is the first physical line of its record;
the other pieces of a record that gave an event are counted parsed with it. A line that is not a
json-file record is quarantined when it holds a family literal (``lines.LITERALS``), noise
otherwise. ``parse_line`` is the chunk path on one line.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import polars as pl

from faultlens.ingest.base import (
    ChunkResult,
    LineResult,
    ParseContext,
    line_series,
    numbered,
)
from faultlens.ingest.lines import LITERALS, PIECES_SCHEMA, LinesParser, LinesState, with_pieces
from faultlens.ingest.nccl import line as nccl_line
from faultlens.ingest.reader import MAX_LINE_BYTES, literal_regex
from faultlens.ingest.schema import Source

_RECORD = pl.Struct({"log": pl.String, "stream": pl.String, "time": pl.String})
# a json-file record as moby writes it (``log`` and ``stream`` omitted when empty)
RECORD_RE = re.compile(
    r'^\{(?:"log":"(?:[^"\\]|\\.)*",)?(?:"stream":"[a-z]+",)?(?:"attrs":\{.*\},)?'
    r'"time":"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+(?:Z|[+-][0-9:]+)"\}\s*$'
)
_TIME_RE = (
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?"
    r"(?:Z|[+-][0-9]{2}:?[0-9]{2})$"
)
_LITERAL = literal_regex(LITERALS)
_PENDING = {"line": pl.Int64, "log": pl.String, "time": pl.String}


@dataclass
class DockerState:
    lines: LinesState
    # the pieces (``line``, ``log``, ``time``) of a record whose last piece is still to come
    pending: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=_PENDING))
    # the other physical lines of each record of several pieces: first line -> piece line
    pieces: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=PIECES_SCHEMA))


def _decoded(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` (``line``, ``raw``) with ``_rec`` (the decoded record; null where the line is
    not one). Polars decodes a chunk at once; a chunk holding a line it cannot decode is decoded
    line by line instead (``json``)."""
    shaped = pl.col("raw").str.contains(RECORD_RE.pattern).fill_null(False)
    f = frame.with_columns(_ok=shaped)
    try:
        return f.with_columns(
            _rec=pl.when("_ok").then(pl.col("raw").str.json_decode(_RECORD))
        ).drop("_ok")
    except pl.exceptions.PolarsError:
        pass

    def one(text: str | None) -> dict[str, str | None] | None:
        try:
            obj = json.loads(text) if text is not None else None
        except ValueError:
            return None
        if not isinstance(obj, dict):
            return None
        values = {k: obj.get(k) for k in ("log", "stream", "time")}
        return values if all(v is None or isinstance(v, str) for v in values.values()) else None

    oks = f.get_column("_ok").to_list()
    recs = [
        one(t) if ok else None for t, ok in zip(f.get_column("raw").to_list(), oks, strict=True)
    ]
    return f.with_columns(_rec=pl.Series(recs, dtype=_RECORD)).drop("_ok")


def _logical(records: pl.DataFrame, state: DockerState) -> pl.DataFrame:
    """Records (``line``, ``log``, ``time``) joined into logical lines (``line``: the first piece's,
    ``log``, ``time``: the first piece's, ``_n``: how many pieces); the pieces of a record not
    finished yet are kept in ``state.pending``."""
    f = pl.concat([state.pending, records]) if state.pending.height else records
    done = pl.col("log").fill_null("").str.ends_with("\n")
    f = f.with_columns(_grp=done.shift(1, fill_value=True).cum_sum())
    last_done = f.height == 0 or bool(f.select(done.last()).item())
    if not last_done:
        last = f.get_column("_grp").max()
        state.pending = f.filter(pl.col("_grp") == last).select(list(_PENDING))
        f = f.filter(pl.col("_grp") < last)
    else:
        state.pending = pl.DataFrame(schema=_PENDING)
    return _join(f)


def _join(f: pl.DataFrame) -> pl.DataFrame:
    if not f.height:
        return pl.DataFrame(schema={**_PENDING, "_n": pl.UInt32, "_lines": pl.List(pl.Int64)})
    if "_grp" not in f.columns or f.get_column("_grp").n_unique() == f.height:
        return f.select(*_PENDING, _n=pl.lit(1, pl.UInt32), _lines=pl.lit([], pl.List(pl.Int64)))
    return (
        f.group_by("_grp", maintain_order=True)
        .agg(
            pl.col("line").first(),
            pl.col("log").fill_null("").str.join(""),
            pl.col("time").first(),
            _n=pl.len(),
            _lines=pl.col("line").slice(1),
        )
        .drop("_grp")
    )


class DockerJsonParser:
    """Docker json-file logs: the records decoded and joined, then every family read."""

    name = "docker_json"
    source = Source.KERNEL  # the events carry each family's own source
    whole_file = False

    def __init__(self) -> None:
        self._lines = LinesParser()

    def sniff(self, head_lines: list[str], path: str) -> float:
        lines = [ln for ln in head_lines[:100] if ln.strip()]
        if not lines:
            return 0.0
        full = sum(1 for ln in lines if RECORD_RE.match(ln))
        # a long record may reach the sniffer cut short: its start must be a record's
        cut = sum(1 for ln in lines if ln.startswith('{"log":"') and not RECORD_RE.match(ln))
        return 0.97 if full and (full + cut) / len(lines) >= 0.8 else 0.0

    def new_state(self, ctx: ParseContext) -> DockerState:
        return DockerState(self._lines.new_state(ctx))

    def parse_line(self, line: str, ctx: ParseContext) -> LineResult:
        """The chunk path on one line."""
        state = self.new_state(ctx)
        one = self.parse_chunk(pl.Series([line], dtype=pl.String), 1, ctx, state)
        return one.merge(self.finish(ctx, state)).to_line_result()

    def parse_chunk(
        self, lines: pl.Series, first_line: int, ctx: ParseContext, state: DockerState
    ) -> ChunkResult:
        f = _decoded(numbered(lines, first_line))
        bad = f.filter(
            pl.col("_rec").is_null()
            & pl.col("raw").is_not_null()
            & pl.col("raw").str.contains(_LITERAL).fill_null(False)
        )
        records = f.filter(pl.col("_rec").is_not_null()).select(
            "line",
            log=pl.col("_rec").struct.field("log"),
            time=pl.col("_rec").struct.field("time"),
        )
        logical = _logical(records, state)
        last_line = first_line + lines.len() - 1
        if state.pending.height:
            last_line = int(state.pending.get_column("line").min()) - 1
        result = self._read(logical, last_line, ctx, state)
        if bad.height:
            q = bad.select(
                "line",
                raw=pl.col("raw").str.slice(0, 4000),
                reason=pl.lit("docker json-file: not a json-file record"),
            )
            result = result.merge(ChunkResult(quarantine=q, parsed_lines=line_series([])))
        return result

    def _read(
        self, logical: pl.DataFrame, last_line: int, ctx: ParseContext, state: DockerState
    ) -> ChunkResult:
        """The logical lines through the ``lines`` reader, each as ``[<time>] <line>``."""
        multi = logical.filter(pl.col("_n") > 1)
        if multi.height:
            pieces = multi.select("line", other="_lines").explode("other")
            state.pieces = pl.concat([state.pieces, pieces])
        text = pl.col("log").fill_null("").str.strip_suffix("\n").str.strip_suffix("\r")
        stamped = pl.col("time").str.contains(_TIME_RE).fill_null(False)
        raw = pl.when(stamped).then(pl.concat_str([pl.lit("["), "time", pl.lit("] "), text]))
        f = logical.select("line", raw=raw.otherwise(text), _text=text)
        long = f.filter(pl.col("_text").str.len_bytes() > MAX_LINE_BYTES)
        f = f.filter(pl.col("_text").str.len_bytes() <= MAX_LINE_BYTES)
        follows = pl.col("_text").shift(1).str.contains(nccl_line.LAST_ERROR, literal=True)
        cand = f.with_columns(follows=follows.fill_null(False)).filter(
            pl.col("_text").str.contains(_LITERAL) | pl.col("follows")
        )
        result = self._lines.parse_candidates(cand.drop("_text"), last_line, ctx, state.lines)
        if long.height:
            q = long.select(
                "line",
                raw=pl.col("raw").str.slice(0, 4000),
                reason=pl.lit(f"docker json-file: a line of more than {MAX_LINE_BYTES} bytes"),
            )
            result = result.merge(ChunkResult(quarantine=q, parsed_lines=line_series([])))
        result, state.pieces = with_pieces(result, state.pieces)
        return result

    def finish(self, ctx: ParseContext, state: DockerState) -> ChunkResult:
        """A record whose last piece never came (the container stopped mid-line) is read as it
        stands; then what the families still hold."""
        rest = ChunkResult(parsed_lines=line_series([]))
        if state.pending.height:
            last = int(state.pending.get_column("line").max())
            tail = _join(state.pending.with_columns(_grp=pl.lit(0, pl.UInt32)))
            state.pending = pl.DataFrame(schema=_PENDING)
            rest = self._read(tail, last, ctx, state)
        end = self._lines.finish(ctx, state.lines)
        end, state.pieces = with_pieces(end, state.pieces)
        return rest.merge(end)


PARSERS = [DockerJsonParser()]

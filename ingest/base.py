"""What every parser shares: the context it runs in, what it returns, and small normalizers.

A parser module (one per log source) exposes a ``Parser`` object with

- ``sniff(head_lines, path) -> float``: how sure it is (0..1) that a file is in its format;
- ``parse_line(line, ctx) -> LineResult``: the pure one-line path that documents the format
  (``None`` for noise, a ``Parsed`` with the rows, or a ``Quarantined`` with a reason);
- ``parse_chunk(lines, first_line, ctx, state) -> ChunkResult``: the vectorized path that does the
  real work over a whole chunk of lines (polars expressions);
- ``finish(ctx, state) -> ChunkResult``: flush what is pending at end of file (multi-line records).

Optional (the fast path for sparse formats; parsers without it get every line as before):
``prefilter: Sequence[str]`` literals plus ``parse_candidates(cand, last_line, ctx, state) ->
ChunkResult``. The driver then splits and filters chunks itself (in a reader thread) and hands the
parser only the lines containing a literal, as a frame ``line`` (Int64) / ``raw`` (String), plus
the number of the chunk's last line; every other line is counted as noise without being parsed.
With ``raw_scan = True`` the candidates are found in the raw bytes instead (``ingest.scan``), and
an optional ``prefilter_follow`` literal makes the line after each line holding it a candidate too
(a Boolean ``follows`` column).

Accounting: a parser reports how many input lines it turned into rows (``parsed``, continuation
lines of a multi-line record included) and which lines it quarantined; every other line of the
chunk is noise. Null entries in ``lines`` (empty lines, and over-long lines already quarantined by
the driver) must be neither parsed nor quarantined. A parser that also reports *which* lines it
parsed (``parsed_lines``; the line-log families do) gets its accounting checked: the driver
asserts that the parsed and quarantined sets are disjoint, within the file's lines and as large
as the counts, and computes noise as the lines in neither set.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import polars as pl

from faultlens.ingest.schema import Source, conform

QUARANTINE_SCHEMA = {"line": pl.Int64, "raw": pl.String, "reason": pl.String}
RAW_KEEP_CHARS = 4000  # quarantined raw text is kept up to this length
# ``per_distinct`` joins per-key results back only when keys repeat this many times on average
PER_DISTINCT_MIN_REPEAT = 2


@dataclass
class ParseContext:
    """Everything a parser may know about a file besides its lines. Passed in, never global."""

    file: str
    node: str | None = None  # node for lines that name none (dmesg, per-node files)
    node_origin: str | None = None  # where ``node`` came from: option (--node) or path
    node_pattern: str | None = None  # regex over the file's path with a ``node`` group
    year: int | None = None  # for year-less stamps (syslog RFC 3164, glog)
    mtime: datetime | None = None  # file's modification time (UTC), to infer the year
    boot_time: datetime | None = None  # for boot-relative dmesg stamps
    job_id: str | None = None
    columns: list[str] | None = None  # for headerless tabular input (sacct --noheader)
    delimiter: str | None = None
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class Parsed:
    """One line's rows: table name -> list of row dicts."""

    rows: dict[str, list[dict[str, Any]]]


@dataclass
class Quarantined:
    reason: str


LineResult = Parsed | Quarantined | None


@dataclass
class ChunkResult:
    tables: dict[str, pl.DataFrame] = field(default_factory=dict)
    parsed: int = 0  # input lines that became (part of) rows
    quarantine: pl.DataFrame | None = None  # columns line, raw, reason
    boot_time: datetime | None = None  # wall-clock boot time learned from the file, if any
    # The line numbers behind ``parsed`` (Int64), or None when the parser does not say.
    parsed_lines: pl.Series | None = None

    @property
    def quarantined(self) -> int:
        return 0 if self.quarantine is None else self.quarantine.height

    def to_line_result(self) -> LineResult:
        """This result of a one-line chunk as ``parse_line``'s answer (the parsers whose pure
        per-line path is their chunk path run over one line)."""
        if self.quarantine is not None and self.quarantine.height:
            return Quarantined(self.quarantine["reason"][0])
        if not self.parsed:
            return None
        return Parsed({k: v.to_dicts() for k, v in self.tables.items() if v.height})

    def merge(self, other: ChunkResult) -> ChunkResult:
        tables = dict(self.tables)
        for name, frame in other.tables.items():
            tables[name] = (
                pl.concat([tables[name], frame], how="diagonal_relaxed")
                if (name in tables)
                else frame
            )
        quarantine = [q for q in (self.quarantine, other.quarantine) if q is not None]
        return ChunkResult(
            tables=tables,
            parsed=self.parsed + other.parsed,
            quarantine=pl.concat(quarantine) if quarantine else None,
            boot_time=other.boot_time or self.boot_time,
            parsed_lines=merge_lines(self, other),
        )

    def known_lines(self) -> pl.Series | None:
        """``parsed_lines``, empty when nothing was parsed, None when the parser does not say."""
        if self.parsed_lines is not None:
            return self.parsed_lines
        return line_series([]) if self.parsed == 0 else None


def line_series(lines: Any) -> pl.Series:
    """Line numbers (a list, a Series or a frame column) as an Int64 series."""
    return pl.Series("line", lines, dtype=pl.Int64)


def merge_lines(*results: ChunkResult) -> pl.Series | None:
    """The parsed lines of several results, or None if any of them does not say."""
    parts = [r.known_lines() for r in results]
    if any(p is None for p in parts):
        return None
    return pl.concat(parts) if parts else line_series([])


class Parser(Protocol):
    name: str
    source: Source
    whole_file: bool  # True: parse_chunk receives every line of the file at once

    def sniff(self, head_lines: list[str], path: str) -> float: ...

    def parse_line(self, line: str, ctx: ParseContext) -> LineResult: ...

    def new_state(self, ctx: ParseContext) -> Any: ...

    def parse_chunk(
        self, lines: pl.Series, first_line: int, ctx: ParseContext, state: Any
    ) -> ChunkResult: ...

    def finish(self, ctx: ParseContext, state: Any) -> ChunkResult: ...


# -- helpers shared by parsers ---------------------------------------------------------------------


def numbered(lines: pl.Series, first_line: int) -> pl.DataFrame:
    """A frame of (line number, text) for a chunk."""
    return pl.DataFrame(
        {
            "line": pl.int_range(first_line, first_line + lines.len(), eager=True, dtype=pl.Int64),
            "raw": lines.rename("raw"),
        }
    )


def quarantine_frame(line_nos: list[int], raws: list[str], reasons: list[str]) -> pl.DataFrame:
    return pl.DataFrame(
        {"line": line_nos, "raw": [r[:RAW_KEEP_CHARS] for r in raws], "reason": reasons},
        schema=QUARANTINE_SCHEMA,
    )


def rows_to_frames(rows: dict[str, list[dict[str, Any]]]) -> dict[str, pl.DataFrame]:
    """Row dicts (from the per-line path) into conformed frames, one per table."""
    return {
        table: conform(table, pl.DataFrame(items, infer_schema_length=None))
        for table, items in rows.items()
        if items
    }


_DOMAIN = re.compile(r"\..*$")


def normalize_node(name: str | None) -> str | None:
    """Lower-case, domain stripped: ``GPU-01.cluster.local`` -> ``gpu-01``. IPs stay as they are."""
    if name is None:
        return None
    name = name.strip().lower()
    if not name:
        return None
    if re.fullmatch(r"[0-9.]+", name) or ":" in name:
        return name
    return _DOMAIN.sub("", name)


def node_expr(expr: pl.Expr) -> pl.Expr:
    """Vectorized ``normalize_node``."""
    lowered = expr.str.strip_chars().str.to_lowercase()
    is_ip = lowered.str.contains(r"^[0-9.]+$") | lowered.str.contains(":", literal=True)
    return pl.when(is_ip).then(lowered).otherwise(lowered.str.replace(r"\..*$", ""))


_PCI = re.compile(
    r"^(?:(?P<dom>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):(?P<dev>[0-9a-fA-F]{1,2})"
    r"(?:\.(?P<fn>[0-7]))?$"
)


def normalize_pci(text: str | None) -> str | None:
    """``0000:3B:00`` / ``3b:00.0`` / ``00000000:3B:00.0`` -> ``0000:3b:00.0``; else None."""
    if not text:
        return None
    m = _PCI.match(text.strip().removeprefix("PCI:"))
    if not m:
        return None
    dom = int(m["dom"] or "0", 16)
    return f"{dom:04x}:{int(m['bus'], 16):02x}:{int(m['dev'], 16):02x}.{int(m['fn'] or '0')}"


def pci_expr(expr: pl.Expr) -> pl.Expr:
    """Vectorized ``normalize_pci`` over strings like ``0000:3b:00`` or ``00000000:3B:00.0``."""
    parts = (
        expr.str.strip_chars()
        .str.strip_prefix("PCI:")
        .str.to_lowercase()
        .str.extract_groups(r"^(?:([0-9a-f]{1,8}):)?([0-9a-f]{1,2}):([0-9a-f]{1,2})(?:\.([0-7]))?$")
    )
    dom = parts.struct.field("1").fill_null("0").str.strip_chars_start("0").str.zfill(4)
    bus = parts.struct.field("2").str.zfill(2)
    dev = parts.struct.field("3").str.zfill(2)
    fn = parts.struct.field("4").fill_null("0")
    # concat_str, not pl.format: polars 2.1 pl.format panics on some unnested struct columns
    return pl.when(bus.is_not_null()).then(
        pl.concat_str([dom, pl.lit(":"), bus, pl.lit(":"), dev, pl.lit("."), fn])
    )


def to_json(attrs: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in attrs.items() if v is not None}, sort_keys=True)


def fmt(template: str, *args: pl.Expr | str) -> pl.Expr:
    """``pl.format`` built from ``pl.concat_str`` (null if any argument is null).

    polars 2.1's ``pl.format`` panics ("assertion failed: i < self.len()") on string columns
    that come out of ``extract_groups(...).unnest()``; this does the same without that path.
    """
    pieces = template.split("{}")
    if len(pieces) - 1 != len(args):
        raise ValueError(f"template {template!r} takes {len(pieces) - 1} arguments")
    exprs: list[pl.Expr] = []
    for i, piece in enumerate(pieces):
        if piece:
            exprs.append(pl.lit(piece))
        if i < len(args):
            arg = args[i]
            exprs.append((pl.col(arg) if isinstance(arg, str) else arg).cast(pl.String))
    return pl.concat_str(exprs)


def per_distinct(
    frame: pl.DataFrame,
    key: pl.Expr,
    added: Callable[[pl.DataFrame], pl.DataFrame],
) -> pl.DataFrame:
    """``frame`` with the columns ``added`` adds to it, computed once per distinct ``key`` (an
    expression of the columns ``added`` reads, its value telling their values apart): the rows
    of a log repeat the same message, and a regex then runs once per message, not per line.
    ``added`` must keep its input's rows and order and change none of its columns. When rows
    repeat their key fewer than ``PER_DISTINCT_MIN_REPEAT`` times on average, ``added`` runs on
    every row instead (no join)."""
    keyed = frame.with_columns(_key=key)
    first = keyed.get_column("_key").is_first_distinct()
    if first.sum() * PER_DISTINCT_MIN_REPEAT > frame.height:
        return added(frame)
    new = added(keyed.filter(first))
    cols = ["_key", *(c for c in new.columns if c not in keyed.columns)]
    return keyed.join(
        new.select(cols), on="_key", how="left", nulls_equal=True, maintain_order="left"
    ).drop("_key")

"""journalctl's record formats: an entry over several lines, its time and host on lines of its own.

- ``-o export`` (``journal_export``): ``KEY=value`` lines, a blank line after each entry;
  ``__REALTIME_TIMESTAMP`` (microseconds since the epoch, UTC), ``_HOSTNAME``,
  ``_SOURCE_MONOTONIC_TIMESTAMP`` (microseconds since boot) and ``MESSAGE``. A field that is not
  printable UTF-8 is written binary-safe: its name alone on a line, then a 64-bit little-endian
  length and the bytes; such a ``MESSAGE`` is read from the line after its name (the eight length
  bytes dropped; a value holding a newline keeps its first line only).
- ``-o verbose`` (``journal_verbose``): a header ``Tue 2024-05-01 10:00:00.123456 UTC [s=..;i=..]``
  (the zone as in ``short-full``: ``prefixes.zoned_ts``; an abbreviation that names no single
  offset leaves the time unknown, flagged ``tz_unknown``, or ``boot_relative`` when the entry
  has its ``_SOURCE_MONOTONIC_TIMESTAMP``, which a boot time resolves), then ``    KEY=value``
  lines (a multi-line value goes on under its first line, indented further).
- ``-o json-pretty`` (``journal_json_pretty``): the ``json`` objects over several lines; each
  record holding a kernel literal is joined and read as ``journal_json`` reads one line.

Only the records whose message holds one of the kernel parser's literals are looked at; their
message goes through the kernel parser with the record's time, host and boot-relative seconds.
The event is placed at the ``MESSAGE`` line (``json-pretty``: the ``"MESSAGE"`` key's line); every
other line of a record is noise. Records are told apart over whole chunks with polars
expressions; a record still open at a chunk's end is carried over to the next chunk.
"""

from __future__ import annotations

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
from faultlens.ingest.kernel import patterns as kp
from faultlens.ingest.kernel.parser import (
    PREFIXED_SCHEMA,
    KernelParser,
    KernelState,
    classify_prefixed,
    journal_objects,
)
from faultlens.ingest.prefixes import FULL_STAMP, nodes_of, zoned_ts
from faultlens.ingest.reader import literal_regex
from faultlens.ingest.zones import zone_of

_LITERAL = literal_regex(kp.LITERALS)
_FIELD = r"^([A-Za-z0-9_]+)="
_VERBOSE_FIELD = r"^    ([A-Za-z0-9_]+)="
_VERBOSE_HEAD = rf"^(?P<head>{FULL_STAMP}) \[s="
_PRETTY_KEY = r'^[ \t]*"MESSAGE"[ \t]*:'
_EMPTY = pl.DataFrame(schema={"line": pl.Int64, "raw": pl.String})


@dataclass
class RecordState:
    kernel: KernelState = field(default_factory=KernelState)
    # the lines (``line``, ``raw``) of the record still open at the last chunk's end
    pending: pl.DataFrame = field(default_factory=lambda: _EMPTY.clone())


class _RecordParser(KernelParser):
    """What the three record formats share: records across chunks, the kernel parser after."""

    prefilter = ()  # every line: a record's time and host are on lines without a literal
    raw_scan = False

    def new_state(self, ctx: ParseContext) -> RecordState:  # type: ignore[override]
        return RecordState()

    def starts(self) -> pl.Expr:
        """True on the first line of a record (``raw`` is null on a blank line)."""
        raise NotImplementedError

    def records(
        self, frame: pl.DataFrame, last_line: int | None, ctx: ParseContext, state: RecordState
    ) -> ChunkResult:
        """The events of complete records (``line``, ``raw``, ``_rec``)."""
        raise NotImplementedError

    def parse_line(self, line: str, ctx: ParseContext) -> LineResult:
        """One line alone is a record only for ``json-pretty`` written on one line; this is the
        chunk path on that line (the format needs the lines around it)."""
        state = self.new_state(ctx)
        one = self.parse_chunk(pl.Series([line], dtype=pl.String), 1, ctx, state)
        return one.merge(self.finish(ctx, state)).to_line_result()

    def parse_chunk(  # type: ignore[override]
        self, lines: pl.Series, first_line: int, ctx: ParseContext, state: RecordState
    ) -> ChunkResult:
        frame = pl.concat([state.pending, numbered(lines, first_line)])
        frame = frame.with_columns(_rec=self.starts().fill_null(False).cum_sum())
        last = frame.get_column("_rec").max()
        done = frame.filter(pl.col("_rec") < last)
        state.pending = frame.filter(pl.col("_rec") == last).select("line", "raw")
        if not done.height:
            return ChunkResult(parsed_lines=line_series([]))
        return self.records(done, int(done.get_column("line").max()), ctx, state)

    def finish(self, ctx: ParseContext, state: RecordState) -> ChunkResult:  # type: ignore[override]
        rest = state.pending.with_columns(_rec=pl.lit(0, pl.UInt32))
        state.pending = _EMPTY.clone()
        result = (
            self.records(rest, None, ctx, state)
            if rest.height
            else ChunkResult(parsed_lines=line_series([]))
        )
        return result.merge(super().finish(ctx, state.kernel))


def _fields(frame: pl.DataFrame, pattern: str, keys: tuple[str, ...]) -> pl.DataFrame:
    """``_rec``, ``line``, ``key``, ``value`` of the lines ``KEY=value`` (``pattern``'s group 1 is
    the key, the value follows its ``=``) whose key is in ``keys``."""
    key = pl.col("raw").str.extract(pattern, 1)
    f = frame.with_columns(key=key).filter(pl.col("key").is_in(keys))
    start = pl.col("raw").str.find("=", literal=True) + 1
    return f.select("_rec", "line", "key", value=pl.col("raw").str.slice(start))


def _kernel_messages(fields: pl.DataFrame, frame: pl.DataFrame) -> pl.DataFrame:
    """Each record's first MESSAGE holding a kernel literal: ``_rec``, its ``line``, the line's
    ``raw`` text and the message as ``body``."""
    return (
        fields.filter((pl.col("key") == "MESSAGE") & pl.col("value").str.contains(_LITERAL))
        .unique("_rec", keep="first", maintain_order=True)
        .join(frame.select("line", "raw"), on="line")
        .select("_rec", "line", "raw", body="value")
    )


def _first(fields: pl.DataFrame, key: str, name: str) -> pl.DataFrame:
    """The first value of ``key`` in each record, as column ``name``."""
    return (
        fields.filter(pl.col("key") == key)
        .unique("_rec", keep="first", maintain_order=True)
        .select("_rec", pl.col("value").alias(name))
    )


def _micros(col: str) -> pl.Expr:
    """A decimal count of microseconds (``__REALTIME_TIMESTAMP``) as a time; null if not one."""
    us = pl.col(col).str.strip_chars().cast(pl.Int64, strict=False)
    return pl.when(us.is_between(0, 10**17)).then(pl.from_epoch(us, time_unit="us"))


def _uptime(col: str) -> pl.Expr:
    """``_SOURCE_MONOTONIC_TIMESTAMP`` in seconds (as ``parser.journal_prefix`` reads it)."""
    text = pl.col(col).str.strip_chars()
    ok = text.str.contains(r"^[0-9]{1,15}$").fill_null(False)
    return pl.when(ok).then(text.cast(pl.Int64, strict=False) / 1e6)


def _prefixed(msgs: pl.DataFrame, ctx: ParseContext) -> pl.DataFrame:
    """``msgs`` (``line``, ``raw``, ``body``, ``ts``, ``uptime_s``, ``host``, ``_zone_flag``) in
    ``PREFIXED_SCHEMA``: the host normalized (``ctx.node`` when none), the time's flag."""
    msgs = msgs.with_columns(node=nodes_of(msgs, "host"))
    flag = (
        pl.when(pl.col("ts").is_not_null())
        .then(pl.lit(None, pl.String))
        .when(pl.col("_zone_flag").is_not_null() & pl.col("uptime_s").is_null())
        .then("_zone_flag")
        .when(pl.col("uptime_s").is_not_null())
        .then(pl.lit("boot_relative"))
        .otherwise(pl.lit("no_ts"))
    )
    out = msgs.with_columns(
        node=pl.coalesce("node", pl.lit(ctx.node, pl.String)),
        ts_flag=flag,
    )
    return out.select(pl.col(k).cast(t) for k, t in PREFIXED_SCHEMA.items())


class JournalExportParser(_RecordParser):
    name = "journal_export"

    def sniff(self, head_lines: list[str], path: str) -> float:
        lines = [ln for ln in head_lines[:200] if ln.strip()]
        if not lines:
            return 0.0
        fields = sum(1 for ln in lines if re.match(_FIELD, ln))
        stamped = any(ln.startswith(("__REALTIME_TIMESTAMP=", "__CURSOR=")) for ln in lines)
        return 0.95 if stamped and fields / len(lines) >= 0.8 else 0.0

    def starts(self) -> pl.Expr:
        raw = pl.col("raw")
        blank = raw.is_null() | (raw == "")
        return ~blank & blank.shift(1, fill_value=True)

    def records(
        self, frame: pl.DataFrame, last_line: int | None, ctx: ParseContext, state: RecordState
    ) -> ChunkResult:
        # a binary-safe MESSAGE: the name alone, the value on the next line after 8 length bytes
        frame = frame.with_columns(
            pl.when((pl.col("raw") == "MESSAGE") & (pl.col("_rec").shift(-1) == pl.col("_rec")))
            .then(pl.concat_str([pl.lit("MESSAGE="), pl.col("raw").shift(-1).str.slice(8)]))
            .otherwise("raw")
            .alias("_text")
        )
        f = frame.select("_rec", "line", raw="_text")
        keys = ("MESSAGE", "__REALTIME_TIMESTAMP", "_HOSTNAME", "_SOURCE_MONOTONIC_TIMESTAMP")
        fields = _fields(f, _FIELD, keys)
        msgs = _kernel_messages(fields, frame)
        if not msgs.height:
            return ChunkResult(parsed_lines=line_series([]))
        fields = fields.filter(pl.col("_rec").is_in(msgs.get_column("_rec").implode()))
        for key, name in (
            ("__REALTIME_TIMESTAMP", "_rt"),
            ("_HOSTNAME", "host"),
            ("_SOURCE_MONOTONIC_TIMESTAMP", "_mono"),
        ):
            msgs = msgs.join(_first(fields, key, name), on="_rec", how="left")
        msgs = msgs.with_columns(
            ts=_micros("_rt"), uptime_s=_uptime("_mono"), _zone_flag=pl.lit(None, pl.String)
        )
        return classify_prefixed(_prefixed(msgs, ctx), None, ctx, state.kernel, last_line)


class JournalVerboseParser(_RecordParser):
    name = "journal_verbose"

    def sniff(self, head_lines: list[str], path: str) -> float:
        lines = [ln for ln in head_lines[:200] if ln.strip()]
        if not lines:
            return 0.0
        heads = sum(1 for ln in lines if re.match(_VERBOSE_HEAD, ln))
        fields = sum(1 for ln in lines if ln.startswith("    "))
        return 0.95 if heads and (heads + fields) / len(lines) >= 0.8 else 0.0

    def starts(self) -> pl.Expr:
        return pl.col("raw").str.contains(_VERBOSE_HEAD)

    def records(
        self, frame: pl.DataFrame, last_line: int | None, ctx: ParseContext, state: RecordState
    ) -> ChunkResult:
        keys = ("MESSAGE", "_HOSTNAME", "_SOURCE_MONOTONIC_TIMESTAMP")
        fields = _fields(frame, _VERBOSE_FIELD, keys)
        msgs = _kernel_messages(fields, frame)
        if not msgs.height:
            return ChunkResult(parsed_lines=line_series([]))
        recs = msgs.get_column("_rec").implode()
        fields = fields.filter(pl.col("_rec").is_in(recs))
        heads = (
            frame.filter(pl.col("_rec").is_in(recs) & self.starts())
            .select("_rec", g=pl.col("raw").str.extract_groups(_VERBOSE_HEAD))
            .unique("_rec", keep="first", maintain_order=True)
        )
        g = pl.col("g").struct
        ts, flag = zoned_ts(
            g.field("date"), g.field("hms"), g.field("frac"), g.field("zone"), zone_of(ctx)
        )
        heads = heads.select("_rec", ts=ts, _zone_flag=flag)
        msgs = msgs.join(heads, on="_rec", how="left")
        for key, name in (("_HOSTNAME", "host"), ("_SOURCE_MONOTONIC_TIMESTAMP", "_mono")):
            msgs = msgs.join(_first(fields, key, name), on="_rec", how="left")
        msgs = msgs.with_columns(uptime_s=_uptime("_mono"))
        return classify_prefixed(_prefixed(msgs, ctx), None, ctx, state.kernel, last_line)


class JournalPrettyParser(_RecordParser):
    name = "journal_json_pretty"

    def sniff(self, head_lines: list[str], path: str) -> float:
        lines = [ln.strip() for ln in head_lines[:300] if ln.strip()]
        if not lines or "{" not in lines:
            return 0.0
        stamped = any(re.match(r'^"__REALTIME_TIMESTAMP"[ \t]*:', ln) for ln in lines)
        keyed = sum(1 for ln in lines if re.match(r'^(?:"[A-Za-z0-9_]+"[ \t]*:|[{}\[\]"0-9n])', ln))
        return 0.95 if stamped and keyed / len(lines) >= 0.9 else 0.0

    def starts(self) -> pl.Expr:
        return pl.col("raw").str.strip_chars() == "{"

    def records(
        self, frame: pl.DataFrame, last_line: int | None, ctx: ParseContext, state: RecordState
    ) -> ChunkResult:
        hits = frame.filter(pl.col("raw").str.contains(_LITERAL))
        if not hits.height:
            return ChunkResult(parsed_lines=line_series([]))
        recs = hits.get_column("_rec").unique().implode()
        part = frame.filter(pl.col("_rec").is_in(recs))
        # the event's line: the MESSAGE key's, else the record's first line with a literal
        at = (
            part.filter(pl.col("raw").str.contains(_PRETTY_KEY))
            .unique("_rec", keep="first", maintain_order=True)
            .select("_rec", "line")
        )
        first_hit = hits.unique("_rec", keep="first", maintain_order=True).select(
            "_rec", _hit="line"
        )
        objects = (
            part.group_by("_rec", maintain_order=True)
            .agg(pl.col("raw").fill_null("").str.join("\n"))
            .join(first_hit, on="_rec")
            .join(at, on="_rec", how="left")
            .select(pl.coalesce("line", "_hit").alias("line"), "raw")
        )
        return journal_objects(objects, last_line, ctx, state.kernel)


PARSERS = [JournalExportParser(), JournalVerboseParser(), JournalPrettyParser()]

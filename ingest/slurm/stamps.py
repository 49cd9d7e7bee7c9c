"""The time stamps of Slurm daemon log lines, one form per ``LogTimeFormat`` (slurm.conf).

slurmctld and slurmd write ``[%M] message`` to their log files; ``%M`` is, by ``LogTimeFormat``
(Slurm's ``src/common/log.c``):

- ``iso8601_ms`` (the default) / ``iso8601``: ``2024-01-02T03:04:05.123`` / ``2024-01-02T03:04:05``,
  local time without a zone (UTC unless ``ctx.options['tz']``; a time that zone has twice or
  never is null, flagged ``tz_ambiguous`` / ``tz_gap``: ``ingest.zones``);
- ``rfc5424_ms`` / ``rfc5424`` (and ``rfc3339`` of newer Slurm): the same followed by the local
  offset, ``2024-01-02T03:04:05.123+01:00``: read exactly, whatever ``tz`` says;
- ``short``: ``Jan 02 03:04:05`` (``%b %d %T``, no year; a fraction is accepted too);
- ``thread_id``: ``Jan  2 03:04:05.5      4242 rpcmgr       0x7f5c...`` (ctime without weekday
  and year, the microseconds as a plain number, left-justified, the pid, thread name and id); the
  same head followed by ``: `` stands before each line a foreground daemon writes to stderr;
- ``clock``: ``1234567``, the process's CPU time in microseconds (``clock()``): no wall time at
  all, so the event is kept with ``ts`` null and ``ts_flag = 'cpu_clock'``.

Times are read to the second, whatever the format (as the default's milliseconds always were).
A stamp without a year (``short``, ``thread_id``) takes ``ctx.year``, else the year of the file's
mtime (flagged ``year_from_mtime``; a date more than a day after the mtime is of the year before);
with neither, the time is null and flagged ``no_year``. ``format_stderr`` only adds the stamp to
stderr, in one of these forms.

``stamp_ts`` reads one line's groups (the per-line reference); ``stamp_exprs`` is the same over a
frame of them.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import polars as pl

from faultlens.ingest.base import ParseContext
from faultlens.ingest.zones import localize, to_utc, zone_flag, zone_of

ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?"
_MON_DAY_TIME = r"[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d"
# thread_id's tail after the seconds: ``.usec pid name 0xid`` (the thread name may be empty)
_THREAD_TAIL = r"\.(?P<{us}>\d{{1,6}}) +\d+ [^\]:]*?0x[0-9a-fA-F]+"
# ``[%M]`` of every LogTimeFormat (named groups: iso, boff, short, sfrac, tid_us, clock)
BRACKET = (
    rf"\[(?:(?P<iso>{ISO})(?P<boff>Z|[+-]\d\d:?\d\d)?"
    rf"|(?P<short>{_MON_DAY_TIME})(?:\.(?P<sfrac>\d{{1,9}})|{_THREAD_TAIL.format(us='tid_us')})?"
    r"|(?P<clock>\d{1,20}))\]"
)
# thread_id on stderr: ``Jan  2 03:04:05.123456 4242 rpcmgr 0x7f5c...: `` (groups tid, tid_us2)
THREAD_STDERR = rf"(?P<tid>{_MON_DAY_TIME}){_THREAD_TAIL.format(us='tid_us2')}: "
# The stamp alone, anchored (the file sniff and the line router): with a zone, only as Slurm
# writes it (milliseconds, ``+hh:mm``), so that a collector's ``[...123456789Z]`` stays its own
STAMP_LINE = (
    r"^(?:\[(?:[0-9]{4}-[0-9]{2}-[0-9]{2}T(?:[0-9:.]+|[0-9:]{8}(?:\.[0-9]{3})?[+-][0-9]{2}:[0-9]{2})"
    r"|[A-Z][a-z]{2} [ 0-9][0-9] [0-9:]{8}(?:\.[0-9]+[^\]]*)?|[0-9]{1,20})\] "
    r"|[A-Z][a-z]{2} [ 0-9][0-9] [0-9:]{8}\.[0-9]{1,6} +[0-9]+ [^\]:]*?0x[0-9a-fA-F]+: )"
)
# thread_id's stderr head without groups (after a journal's own prefix, whose time is taken)
THREAD_INNER = r"[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d\.\d{1,6} +\d+ [^\]:]*?0x[0-9a-fA-F]+: "
GROUPS = ("iso", "boff", "short", "sfrac", "tid_us", "clock", "tid", "tid_us2")


def year_of(ctx: ParseContext) -> int | None:
    """The year of a stamp that has none (``--year``, else the file's mtime year)."""
    return ctx.year or (ctx.mtime.year if ctx.mtime else None)


def yearless_ts(head: str, year: int, mtime: datetime | None) -> datetime:
    """``Mon DD HH:MM:SS`` in ``year``; a time more than a day after ``mtime`` is the year
    before's (a December line read in January). Raises ValueError for no valid time."""
    ts = datetime.strptime(f"{year} {head}", "%Y %b %d %H:%M:%S")
    if mtime and ts > mtime + timedelta(days=1):
        ts = ts.replace(year=year - 1)
    return ts


def yearless_expr(head: pl.Expr, year: int, mtime: datetime | None) -> pl.Expr:
    """``yearless_ts`` over a column (null where polars cannot read the time)."""
    ts = (pl.lit(f"{year} ") + head).str.strptime(
        pl.Datetime("us"), "%Y %b %d %H:%M:%S", strict=False
    )
    if mtime is None:
        return ts
    late = ts > pl.lit(mtime + timedelta(days=1))
    return pl.when(late).then(ts.dt.offset_by("-1y")).otherwise(ts)


def _offset_minutes(off: str) -> int:
    if off == "Z":
        return 0
    digits = off.replace(":", "")
    sign = -1 if digits[0] == "-" else 1
    return sign * (int(digits[1:3]) * 60 + int(digits[3:5]))


def stamp_ts(g: dict[str, Any], ctx: ParseContext) -> tuple[datetime | None, str | None] | None:
    """(UTC time, flag) of a line's stamp groups (``GROUPS``); None when it has none of them.
    Raises ValueError for a stamp that is no valid time."""
    tz = zone_of(ctx)
    if g.get("iso"):
        ts = datetime.fromisoformat(g["iso"][:19])
        if g.get("boff"):
            return ts - timedelta(minutes=_offset_minutes(g["boff"])), None
        return to_utc(ts, tz)
    if g.get("clock"):
        return None, "cpu_clock"
    head = g.get("short") or g.get("tid")
    if not head:
        return None
    year = year_of(ctx)
    if year is None:
        return None, "no_year"
    utc, zflag = to_utc(yearless_ts(head, year, ctx.mtime), tz)
    return utc, zflag or (None if ctx.year else "year_from_mtime")


def stamp_exprs(ctx: ParseContext) -> tuple[pl.Expr, pl.Expr, pl.Expr]:
    """(UTC time, flag, has a stamp) over columns of ``GROUPS`` (the vectorized ``stamp_ts``);
    a stamp polars cannot read leaves the time null."""
    tz = zone_of(ctx)
    iso_local = (
        pl.col("iso")
        .str.slice(0, 19)
        .str.strptime(pl.Datetime("us"), "%Y-%m-%dT%H:%M:%S", strict=False)
    )
    off = pl.col("boff").str.replace(":", "", literal=True)
    off_min = (
        off.str.slice(1, 2).cast(pl.Int64, strict=False) * 60
        + off.str.slice(3, 2).cast(pl.Int64, strict=False)
    ) * pl.when(off.str.starts_with("-")).then(-1).otherwise(1)
    zoneless = pl.col("boff").is_null()
    iso = (
        pl.when(zoneless)
        .then(localize(iso_local, tz))
        .otherwise(iso_local - pl.duration(minutes=pl.when(off == "Z").then(0).otherwise(off_min)))
    )
    head = pl.coalesce("short", "tid")
    year = year_of(ctx)
    yearless = pl.lit(None, pl.Datetime("us"))
    if year is not None:
        yearless = yearless_expr(head, year, ctx.mtime)
    has_iso = pl.col("iso").is_not_null()
    ts = pl.when(has_iso).then(iso).when(head.is_not_null()).then(localize(yearless, tz))
    flag = (
        pl.when(pl.col("clock").is_not_null())
        .then(pl.lit("cpu_clock"))
        .when(head.is_not_null())
        .then(pl.lit("no_year" if year is None else None if ctx.year else "year_from_mtime"))
    )
    if tz:  # a wall-clock time the zone has twice or never: the zone's flag
        local = pl.when(has_iso).then(pl.when(zoneless).then(iso_local)).otherwise(yearless)
        flag = pl.coalesce(zone_flag(local, tz), flag)
    stamped = pl.col("iso").is_not_null()
    if year is not None:
        stamped = stamped | head.is_not_null()
    return ts, flag, stamped

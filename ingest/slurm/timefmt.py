"""Times as sacct / sinfo / scontrol print them under ``SLURM_TIME_FORMAT`` (sacct(1)).

``standard`` (the default) is ``2024-01-02T03:04:05``; a site may set any strftime string
instead, or ``relative``. Read here, in the cluster's local time (UTC unless ``tz``) unless the
text says its zone:

- ISO dates with ``T`` or a space, with or without seconds (``%F %R``), with or without an offset
  (``%FT%T%z``: exact UTC); ``%Y/%m/%d``;
- Unix seconds (``%s``: 9 to 11 digits; UTC whatever ``tz`` says);
- numeric dates with the year last (``%d/%m/%Y``, ``%m/%d/%Y``, dots or dashes): day and month
  told apart only when the numbers do it (one of them above 12, or both equal); otherwise the
  time is not guessed: null, flagged ``ambiguous_date``;
- English month names with a year (``%d %b %Y %T``, ``%b %d %Y %R``, ctime / ``%c``:
  ``Sun Dec  6 06:53:18 2026``).

Not read, kept null and flagged: ``relative`` output and other forms without a date or a year
(``06:53:18``, ``Tomorr 06:53``, ``Sun 06:53``, ``%a %T``, ``25 Apr``: ``relative_time`` — they are
relative to the moment the command ran, which the output does not say; a year taken from the
file's mtime would be a guess for a job list spanning years), dates without a time of day
(``6 Jun 2012``, ``%F``: ``date_only``), and any other text (``unreadable_time``). ``Unknown`` /
``None`` / empty are no time at all (no flag). With ``tz``, a zone-less time its zone has twice
(the hour the clocks go back) or never (the hour they skip) is not guessed either: null, flagged
``tz_ambiguous`` / ``tz_gap`` (``ingest.zones``).

``read_time`` is the per-value reference; ``time_exprs`` the same over a column.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import polars as pl

from faultlens.ingest.zones import localize, to_utc, zone_flag

NO_TIME = ("", "unknown", "none", "n/a", "(null)", "invalid")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
MONTH_NO = {m: i + 1 for i, m in enumerate(_MONTHS)}
_MON = "(?:" + "|".join(_MONTHS) + ")"
_WDAY = "(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
_HMS = r"(?P<hh>\d{1,2}):(?P<mi>\d\d)(?::(?P<ss>\d\d))?"
EPOCH = r"^\d{9,11}$"
# Y-M-D first; T or space; seconds optional; an offset optional
ISO = (
    r"^(?P<y>\d{4})[-/](?P<m>\d{1,2})[-/](?P<d>\d{1,2})[T ]" + _HMS + r"(?:\.\d+)?"
    r"(?P<off>Z|[+-]\d\d:?\d\d)?$"
)
# two numbers then a four-digit year (day and month in either order), a time after it optional
NUMERIC = r"^(?P<a>\d{1,2})(?P<sep>[/.-])(?P<b>\d{1,2})(?P=sep)(?P<y>\d{4})(?:[ T,]+" + _HMS + ")?$"
# Polars' regex has no back-references: the two separators are checked apart
_NUMERIC_PL = (
    r"^(?P<a>\d{1,2})(?P<sep>[/.-])(?P<b>\d{1,2})(?P<sep2>[/.-])(?P<y>\d{4})(?:[ T,]+"
    + _HMS
    + ")?$"
)
# month names with a year: "06 Dec 2026 06:53:18", "Dec 06 2026 06:53", "Sun Dec  6 06:53:18 2026"
NAMED = [
    rf"^(?:{_WDAY},? )?(?P<d>\d{{1,2}}) (?P<mon>{_MON}) (?P<y>\d{{4}})[ ,]+{_HMS}$",
    rf"^(?:{_WDAY},? )?(?P<mon>{_MON}) (?P<d>\d{{1,2}}),? (?P<y>\d{{4}})[ ,]+{_HMS}$",
    rf"^(?:{_WDAY} )?(?P<mon>{_MON}) (?P<d>\d{{1,2}}) {_HMS} (?P<y>\d{{4}})$",
]
RELATIVE = (
    rf"^(?:(?:Tomorr|Ystday|Today|{_WDAY}) )?\d{{1,2}}:\d\d(?::\d\d)?$"
    rf"|^\d{{1,2}} {_MON}$|^{_MON} \d{{1,2}}(?: \d{{1,2}}:\d\d(?::\d\d)?)?$"
)
DATE_ONLY = rf"^\d{{4}}-\d\d-\d\d$|^\d{{1,2}} {_MON} \d{{4}}$|^\d{{1,2}}[/.-]\d{{1,2}}[/.-]\d{{4}}$"


def _offset_minutes(off: str | None) -> int:
    if not off or off == "Z":
        return 0
    digits = off.replace(":", "")
    return (-1 if digits[0] == "-" else 1) * (int(digits[1:3]) * 60 + int(digits[3:5]))


def _month_day(a: int, b: int) -> tuple[int, int] | None:
    """(month, day) of two numbers of a date whose order is not known; None if ambiguous."""
    if a == b or (a > 12 and b <= 12):
        return b, a
    if b > 12 and a <= 12:
        return a, b
    return None


def read_time(text: str | None, tz: str | None = None) -> tuple[datetime | None, str | None]:
    """(naive UTC time, flag) of one printed time; see the module's list of forms."""
    if text is None:
        return None, None
    t = " ".join(text.split())
    if t.lower() in NO_TIME:
        return None, None
    try:
        if re.match(EPOCH, t):
            return datetime(1970, 1, 1) + timedelta(seconds=int(t)), None
        if m := re.match(ISO, t):
            local = _local(int(m["y"]), int(m["m"]), int(m["d"]), m)
            if m["off"]:
                return local - timedelta(minutes=_offset_minutes(m["off"])), None
            return to_utc(local, tz)
        if (m := re.match(NUMERIC, t)) and m["hh"]:
            md = _month_day(int(m["a"]), int(m["b"]))
            if md is None:
                return None, "ambiguous_date"
            return to_utc(_local(int(m["y"]), md[0], md[1], m), tz)
        for rx in NAMED:
            if m := re.match(rx, t):
                month = _MONTHS.index(m["mon"]) + 1
                return to_utc(_local(int(m["y"]), month, int(m["d"]), m), tz)
    except ValueError:  # a date that does not exist (Feb 30, hour 25)
        return None, "unreadable_time"
    if re.match(RELATIVE, t):
        return None, "relative_time"
    if re.match(DATE_ONLY, t):
        return None, "date_only"
    return None, "unreadable_time"


def _local(year: int, month: int, day: int, m: re.Match[str]) -> datetime:
    return datetime(year, month, day, int(m["hh"]), int(m["mi"]), int(m["ss"] or 0))


def _build(y: pl.Expr, mo: pl.Expr, d: pl.Expr, g: pl.Expr) -> pl.Expr:
    """A datetime from year / month / day expressions and the ``hh``, ``mi``, ``ss`` fields of
    struct ``g``; null when the date does not exist."""
    hh = g.struct.field("hh").cast(pl.Int32, strict=False)
    mi = g.struct.field("mi").cast(pl.Int32, strict=False)
    ss = g.struct.field("ss").cast(pl.Int32, strict=False).fill_null(0)
    y, mo, d = (e.cast(pl.Int32, strict=False) for e in (y, mo, d))
    start = pl.date(y, mo, 1).cast(pl.Datetime("us"))
    ts = start + pl.duration(days=d - 1, hours=hh, minutes=mi, seconds=ss)
    ok = (d >= 1) & (ts.dt.month() == mo) & (hh < 24) & (mi < 60) & (ss < 60)
    valid_month = mo.is_between(1, 12)
    return pl.when(valid_month).then(pl.when(ok).then(ts))


def time_exprs(col: pl.Expr, tz: str | None = None) -> tuple[pl.Expr, pl.Expr]:
    """Vectorized ``read_time``: (naive UTC time, flag)."""
    t = col.str.strip_chars().str.replace_all(r"\s+", " ")
    none = t.is_null() | t.str.to_lowercase().is_in(NO_TIME)
    epoch = pl.from_epoch(
        pl.when(t.str.contains(EPOCH)).then(t).cast(pl.Int64, strict=False), time_unit="s"
    ).cast(pl.Datetime("us"))
    g = t.str.extract_groups(ISO)
    iso_local = _build(g.struct.field("y"), g.struct.field("m"), g.struct.field("d"), g)
    off = g.struct.field("off").str.replace(":", "", literal=True)
    off_min = (
        off.str.slice(1, 2).cast(pl.Int64, strict=False) * 60
        + off.str.slice(3, 2).cast(pl.Int64, strict=False)
    ) * pl.when(off.str.starts_with("-")).then(-1).otherwise(1)
    iso_exact = iso_local - pl.duration(minutes=pl.when(off == "Z").then(0).otherwise(off_min))
    n = t.str.extract_groups(_NUMERIC_PL)
    a = n.struct.field("a").cast(pl.Int32, strict=False)
    b = n.struct.field("b").cast(pl.Int32, strict=False)
    same_sep = n.struct.field("sep") == n.struct.field("sep2")
    numeric_ok = same_sep & n.struct.field("hh").is_not_null()
    day_first = (a == b) | ((a > 12) & (b <= 12))
    month_first = (b > 12) & (a <= 12)
    ambiguous = numeric_ok & ~day_first & ~month_first
    numeric = (
        pl.when(numeric_ok & day_first)
        .then(_build(n.struct.field("y"), b, a, n))
        .when(numeric_ok & month_first)
        .then(_build(n.struct.field("y"), a, b, n))
    )
    months = MONTH_NO
    named = []
    for rx in NAMED:
        ng = t.str.extract_groups(rx)
        mon = ng.struct.field("mon").replace_strict(months, default=None, return_dtype=pl.Int32)
        named.append(_build(ng.struct.field("y"), mon, ng.struct.field("d"), ng))
    # the forms that say no zone: wall-clock times of ``tz``
    local = pl.coalesce(pl.when(off.is_null()).then(iso_local), numeric, pl.coalesce(named))
    exact = pl.coalesce(epoch, pl.when(off.is_not_null()).then(iso_exact))
    ts = pl.when(~none).then(pl.coalesce(exact, localize(local, tz)))
    matched = (
        t.str.contains(EPOCH)
        | t.str.contains(ISO)
        | (numeric_ok & ~ambiguous)
        | pl.any_horizontal([t.str.contains(rx) for rx in NAMED])
    )
    flag = pl.when(none | ts.is_not_null()).then(pl.lit(None, pl.String))
    if tz:  # an ambiguous or skipped wall-clock time of the zone
        zflag = zone_flag(local, tz)
        flag = flag.when(exact.is_null() & zflag.is_not_null()).then(zflag)
    flag = (
        flag.when(ambiguous)
        .then(pl.lit("ambiguous_date"))
        .when(matched)
        .then(pl.lit("unreadable_time"))
        .when(t.str.contains(RELATIVE))
        .then(pl.lit("relative_time"))
        .when(t.str.contains(DATE_ONLY))
        .then(pl.lit("date_only"))
        .otherwise(pl.lit("unreadable_time"))
    )
    return ts, flag

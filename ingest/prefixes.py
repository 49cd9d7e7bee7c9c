"""Time and host from whatever a log pipeline put before a message: the prefix library.

A line is recognized by its anchor (``NVRM:``, ``NCCL WARN``, ...); what precedes it says when
and where, in one of the shapes real pipelines write, possibly nested (a collector's stamp around
a syslog line). ``prefix_frame`` reads them over a whole frame of lines with polars expressions:

- RFC 5424: ``<13>1 2024-05-01T10:00:00.123456Z host app procid msgid [sd] message``;
- ISO 8601 / RFC 3339, ``T`` or space, up to nanoseconds, ``Z`` / offset / none, bare
  (rsyslog, journald ``short-iso``; optionally followed by ``host tag[pid]:``) or in brackets
  (a collector's stamp ``[2024-05-01 10:00:00]``, with no host after it);
- RFC 3164 syslog and journald ``short`` / ``short-precise`` (``May 01 10:00:00.123456 host
  tag[pid]:``, the host possibly left out) with month names in any of ``LOCALES`` (taken from
  babel's CLDR data, not hand tables); the year is ``ctx.year`` or the file's mtime year
  (flagged ``year_from_mtime``);
- the CRI log format of containerd / CRI-O: ``2024-05-01T10:00:00.123456789Z stderr F <line>``
  (a ``P`` line is a piece of a longer one: ``lines.join_partials`` joins them first);
- container platforms' kernel log: ``<host>: kern: warning: [2024-05-01T10:00:00.123456789Z]:``;
- journalctl ``short-full`` / ``with-unit`` (``Tue 2024-05-01 10:00:00 UTC host tag[pid]:``; the
  zone is read when it is ``UTC`` / ``GMT`` / ``UT`` or numeric (``+03``, ``-0530``); any other
  abbreviation (``CET``, ``EST``, ``IST``: several zones share some) leaves the time unknown,
  flagged ``tz_unknown``), ``short-unix`` (``1714557600.123456 host tag:``), ``short-monotonic``
  and ``short-delta`` (``[  123.456789 <    0.000123>] host kernel:``: boot-relative seconds,
  ``p_up`` flagged ``boot_relative``; the tag must be ``kernel`` or carry a pid, so that a dmesg
  message such as ``EDAC MC0: ...`` is not read as a host and a tag).

Launcher tags after these (``[rankN]:``, pdsh ``host:``, Ray actors) and the families' own stamps
(dmesg uptime, glog ``E0419 12:00:00.123456``) are read by the family parsers, which see the
message with the outer prefix removed (``body``). Times are UTC.
"""

from __future__ import annotations

import re
import unicodedata
from functools import cache

import polars as pl
from babel.dates import get_month_names

from faultlens.ingest.base import ParseContext, node_expr
from faultlens.ingest.zones import localize, zone_flag, zone_of

# Locales whose month names a node's journal may use (LANG on the node, not the reader's).
LOCALES = (
    "en", "de", "fr", "es", "it", "pt", "nl", "sv", "da", "nb", "fi", "pl", "cs", "sk", "hu",
    "ro", "tr", "ru", "uk", "el", "ca", "hr", "sl", "et", "lv", "lt", "id",
)  # fmt: skip
_ISO = (
    r"(?P<date>[0-9]{4}-[0-9]{2}-[0-9]{2})[T ](?P<hms>[0-9]{2}:[0-9]{2}:[0-9]{2})"
    r"(?:[.,](?P<frac>[0-9]{1,9}))?(?P<tz>Z|[+-][0-9]{2}:?[0-9]{2})?"
)
_HOST = r"(?P<host>[A-Za-z0-9][A-Za-z0-9._-]{0,62})"
_TAG = r"(?:[^\s:\[\]]{1,64})(?:\[[0-9]{1,10}\])?: "
# journalctl's weekday names are English whatever the locale (systemd formats them itself)
_WEEKDAY = "(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
# short-full / verbose: ``%a %Y-%m-%d %H:%M:%S[.usec] %Z`` (an abbreviation or a numeric offset)
FULL_STAMP = (
    rf"{_WEEKDAY} (?P<date>[0-9]{{4}}-[0-9]{{2}}-[0-9]{{2}}) "
    r"(?P<hms>[0-9]{2}:[0-9]{2}:[0-9]{2})"
    r"(?:\.(?P<frac>[0-9]{1,9}))? (?P<zone>[A-Za-z]{1,6}|[+-][0-9]{2}(?::?[0-9]{2})?)"
)
# short-monotonic ``[  123.456789]`` and short-delta ``[  123.456789 <    0.000123 >]`` (``*``
# for a delta across boots; blanks when there is none)
_MONO = r"\[ *(?P<up>[0-9]{1,10}\.[0-9]{6})(?: <[ 0-9.]{1,24}\*?>| {1,16})?\]"
_MONO_TAG = r"(?:kernel|[^\s:\[\]]{1,64}\[[0-9]{1,10}\]): "
# Each shape's head (up to its message), as a regex with named groups; the message (``body``) is
# what follows the head, so no regex scans a line past its prefix.
SHAPES: dict[str, str] = {
    "rfc5424": rf"^(?P<head><[0-9]{{1,3}}>1 {_ISO} {_HOST} \S+ \S+ \S+ (?:-|(?:\[[^\]]*\])+) ?)",
    "talos": rf"^(?P<head>{_HOST}: [a-z]{{3,8}}: +[a-z]{{3,8}}: \[{_ISO}\]: )",
    # a collector's bracketed stamp carries no host: ``[stamp] EDAC MC3: ...`` is a message
    "collector": rf"^(?P<head>(?:<[0-9]{{1,3}}>)?\[{_ISO}\]:? )",
    # containerd / CRI-O (``/var/log/containers``): ``<RFC 3339 nano> stdout|stderr F|P <line>``
    "cri": rf"^(?P<head>{_ISO} (?:stdout|stderr) [FP] )",
    "iso": rf"^(?P<head>(?:<[0-9]{{1,3}}>)?{_ISO}:? (?:{_HOST} {_TAG})?)",
    "full": rf"^(?P<head>{FULL_STAMP} (?:{_HOST} )?{_TAG})",
    "unix": rf"^(?P<head>(?P<epoch>[0-9]{{9,11}})\.(?P<frac>[0-9]{{6}}) (?:{_HOST} )?{_TAG})",
    "mono": rf"^(?P<head>{_MONO} (?:{_HOST} )?{_MONO_TAG})",
    "syslog": (
        r"^(?P<head>(?:<[0-9]{1,3}>)?(?P<mon>[^\W\d_]{2,12}\.?| ?[0-9]{1,2}[月월]) {1,2}"
        r"(?P<day>[0-9]{1,2}),? "
        r"(?P<hms>[0-9]{2}:[0-9]{2}:[0-9]{2})(?:[.,](?P<frac>[0-9]{1,9}))? "
        rf"(?:{_HOST} )?{_TAG})"  # the host is left out by ``journalctl --no-hostname``
    ),
}
# The groups of a line known to match its shape (above) are read with unbounded repetitions:
# every part of the syslog head ends at a character it cannot hold, so on such a line they
# capture the same text, and the bounded copies make the capturing engine several times slower.
CAPTURES: dict[str, str] = {
    **SHAPES,
    "syslog": SHAPES["syslog"]
    .replace("{0,62}", "*")
    .replace("{1,64}", "+")
    .replace("{2,12}", "+")
    .replace("{1,10}", "+"),
}
# The most common head by far (RFC 3164 with an English month, a host and a tag: rsyslog's
# default, journald ``short``), read by slicing at fixed offsets instead of capturing groups. A
# line it matches has no other shape (it starts with a month name) and these same parts under
# ``SHAPES["syslog"]``: every part ends at a character it cannot hold, and the bounds are the same.
_ENGLISH_MONTH_NAMES = (
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
)  # fmt: skip
FAST_SYSLOG = (
    "^(?:" + "|".join(_ENGLISH_MONTH_NAMES) + ") "
    r"[ 0-9][0-9] [0-9]{2}:[0-9]{2}:[0-9]{2} "
    r"[A-Za-z0-9][A-Za-z0-9._-]{0,62} [^\s:\[\]]{1,64}(?:\[[0-9]{1,10}\])?: "
)
# Any shape at all (one match per line: most messages have none, and are then done)
_ANY_SHAPE = "|".join(
    f"(?:{rx})" for rx in (re.sub(r"\(\?P<[a-z]+>", "(?:", v) for v in SHAPES.values())
)
# RFC 3164 month names (English whatever the node's locale): read without loading babel's data
_ENGLISH_MONTHS = {m.lower(): i + 1 for i, m in enumerate(_ENGLISH_MONTH_NAMES)}
_FILL = ("p_ts", "p_host", "p_flag", "p_up")
PREFIX_SCHEMA = {
    "line": pl.Int64,
    "p_ts": pl.Datetime("us"),
    "p_host": pl.String,
    "p_flag": pl.String,
    "p_up": pl.Float64,
}
# Zone abbreviations that name one offset only; any other is not guessed (``tz_unknown``)
UTC_ZONES = ("UTC", "GMT", "UT", "Z")
# A zone written after a clock time (its one group): a ``UTC_ZONES`` name or a numeric offset
# (``+01:00``, ``+0100``, ``+01``), as ``zone_minutes`` reads them
ZONE_SUFFIX = r"(" + "|".join(UTC_ZONES) + r"|[+-]\d\d(?::?\d\d)?)"


_NUMBERED_MONTH = re.compile(r"^([0-9]{1,2})[月월]$")


def _fold(name: str) -> str:
    """A month name as matched: lower case, accents and a trailing dot dropped."""
    text = unicodedata.normalize("NFKD", name.lower().rstrip("."))
    return "".join(c for c in text if not unicodedata.combining(c))


@cache
def month_numbers() -> dict[str, int]:
    """Abbreviated and full month names of ``LOCALES`` (folded) -> month number; a name that
    means different months in two locales is left out."""
    out: dict[str, int] = {}
    clash: set[str] = set()
    for loc in LOCALES:
        for width in ("abbreviated", "wide"):
            for context in ("format", "stand-alone"):
                for no, name in get_month_names(width, context, locale=loc).items():
                    key = _fold(name)
                    if out.get(key, no) != no:
                        clash.add(key)
                    out[key] = no
    return {k: v for k, v in out.items() if k not in clash}


def _iso_ts(g: pl.Expr, zone: str | None = None) -> tuple[pl.Expr, pl.Expr]:
    """(UTC time, flag) of an ISO stamp's groups: exact with an offset or ``Z``; without one,
    the wall clock of ``zone`` (UTC without it), flagged where that has no single answer."""
    frac = g.struct.field("frac").fill_null("0").str.slice(0, 6).str.pad_end(6, "0")
    local = pl.concat_str(
        [g.struct.field("date"), pl.lit("T"), g.struct.field("hms"), pl.lit("."), frac]
    ).str.to_datetime("%Y-%m-%dT%H:%M:%S%.f", time_unit="us", strict=False)
    ts = local - pl.duration(minutes=zone_minutes(g.struct.field("tz")).fill_null(0))
    if zone is None:
        return ts, pl.lit(None, pl.String)
    zone_less = g.struct.field("tz").is_null()
    return (
        pl.when(zone_less).then(localize(local, zone)).otherwise(ts),
        pl.when(zone_less).then(zone_flag(local, zone)),
    )


def zone_minutes(zone: pl.Expr) -> pl.Expr:
    """Minutes east of UTC of a zone as journalctl writes it (``%Z``): 0 for ``UTC_ZONES``, the
    offset of a numeric one (``+03``, ``-0530``, ``+05:30``), null for any other abbreviation."""
    digits = zone.str.replace(":", "", literal=True)
    numeric = digits.str.contains(r"^[+-][0-9]{2}(?:[0-9]{2})?$")
    minutes = digits.str.slice(1, 2).cast(pl.Int64, strict=False) * 60 + digits.str.slice(
        3, 2
    ).cast(pl.Int64, strict=False).fill_null(0)
    sign = pl.when(digits.str.starts_with("-")).then(-1).otherwise(1)
    return (
        pl.when(zone.is_in(UTC_ZONES))
        .then(pl.lit(0, pl.Int64))
        .when(numeric)
        .then(sign * minutes)
        .otherwise(pl.lit(None, pl.Int64))
    )


def zoned_ts(
    date: pl.Expr, hms: pl.Expr, frac: pl.Expr, zone: pl.Expr, site: str | None = None
) -> tuple[pl.Expr, pl.Expr]:
    """(UTC time, flag) of a ``YYYY-MM-DD`` date, ``HH:MM:SS`` time, fraction and ``%Z`` zone
    (``short-full``, ``verbose``). A zone ``zone_minutes`` cannot map is read as the site's zone
    ``site`` (``--tz``) when it is that zone's abbreviation at that time (``CET`` / ``CEST`` for
    Europe/Berlin; the abbreviation also tells the two readings of the hour turned back apart);
    otherwise the time is null, flagged ``tz_unknown``."""
    micros = frac.fill_null("0").str.slice(0, 6).str.pad_end(6, "0")
    local = pl.concat_str([date, pl.lit("T"), hms, pl.lit("."), micros]).str.to_datetime(
        "%Y-%m-%dT%H:%M:%S%.f", time_unit="us", strict=False
    )
    offset = zone_minutes(zone)
    ts = local - pl.duration(minutes=offset)
    if site is not None:
        readings = [
            local.dt.replace_time_zone(site, ambiguous=which, non_existent="null")
            for which in ("earliest", "latest")
        ]
        named = pl.coalesce(
            pl.when(r.dt.strftime("%Z") == zone).then(
                r.dt.convert_time_zone("UTC").dt.replace_time_zone(None)
            )
            for r in readings
        )
        ts = pl.when(offset.is_not_null()).then(ts).otherwise(named)
    flag = pl.when(local.is_not_null() & ts.is_null()).then(pl.lit("tz_unknown"))
    return ts, flag


def epoch_us(seconds: pl.Expr, frac: pl.Expr) -> pl.Expr:
    """A time from Unix seconds and a fraction of six digits (``short-unix``)."""
    us = seconds.cast(pl.Int64, strict=False) * 1_000_000 + frac.cast(pl.Int64, strict=False)
    return pl.from_epoch(us, time_unit="us")


def month_of(token: str) -> int | None:
    """The month a syslog month token names (English first; babel's locales only when needed).
    Chinese, Japanese and Korean locales write the month's number and its sign (``11月``,
    ``11월``, `` 3월``: journalctl under ``zh_CN`` / ``ja_JP`` / ``ko_KR``)."""
    numbered = _NUMBERED_MONTH.match(token.strip())
    if numbered:
        return int(numbered[1]) if 1 <= int(numbered[1]) <= 12 else None
    key = _fold(token)
    return _ENGLISH_MONTHS.get(key) or month_numbers().get(key)


_TS_PARTS = ("_mo", "_dd", "_hh", "_mi", "_ss", "_us", "_stamp")


def _with_syslog_ts(
    frame: pl.DataFrame,
    parts: dict[str, pl.Expr],
    tokens: list[str],
    ctx: ParseContext,
    hms_at: int = 0,
) -> pl.DataFrame:
    """``frame`` with ``_ts`` and ``_flag`` from the syslog shape's parts (``mon``, ``day``,
    ``hms`` (``HH:MM:SS`` at offset ``hms_at``) and ``frac``, which may be absent); ``tokens``:
    the month tokens seen (a file holds a handful, so each is looked up once, not once per
    line). The parts are columns first: an eager expression repeating them would compute each
    again."""
    if ctx.year is None and ctx.mtime is None:
        return frame.with_columns(
            _ts=pl.lit(None, pl.Datetime("us")), _flag=pl.lit(None, pl.String)
        )
    months = {t: month_of(t) for t in tokens}
    hms = parts["hms"]
    micros: pl.Expr = pl.lit(0, pl.Int64)
    if "frac" in parts:
        micros = parts["frac"].str.slice(0, 6).str.pad_end(6, "0").cast(pl.Int64).fill_null(0)
    f = frame.with_columns(
        _mo=parts["mon"].replace_strict(months, default=None, return_dtype=pl.Int32),
        _dd=parts["day"].cast(pl.Int32),
        **{
            k: hms.str.slice(hms_at + i, 2).cast(pl.Int32)
            for k, i in (("_hh", 0), ("_mi", 3), ("_ss", 6))
        },
        _us=micros,
    )
    month, day = pl.col("_mo"), pl.col("_dd")
    if ctx.year is not None:
        year, flag = pl.lit(ctx.year), pl.lit(None, pl.String)
    else:
        year = pl.lit(ctx.mtime.year) - (month > ctx.mtime.month).cast(pl.Int32)
        flag = pl.lit("year_from_mtime")
    f = f.with_columns(
        _stamp=pl.date(year, month, 1).cast(pl.Datetime("us"))
        + pl.duration(
            days=day - 1,
            hours=pl.col("_hh"),
            minutes=pl.col("_mi"),
            seconds=pl.col("_ss"),
            microseconds=pl.col("_us"),
        )
    )
    valid = (
        (day >= 1)
        & (pl.col("_stamp").dt.month() == month)
        & (pl.col("_hh") < 24)
        & (pl.col("_mi") < 60)
        & (pl.col("_ss") <= 60)
    )
    # a leap second (:60) is the next minute, as chrono reads it
    f = f.with_columns(_ts=pl.when(valid).then("_stamp"))
    tz = zone_of(ctx)
    if tz is None:
        return f.with_columns(_flag=pl.when(pl.col("_ts").is_not_null()).then(flag)).drop(_TS_PARTS)
    # the stamp says no zone: the site's wall clock (--tz), converted; none where it has no
    # single answer (the hour turned back, the hour skipped), flagged
    local = pl.col("_ts")
    f = f.with_columns(_ts=localize(local, tz), _zf=zone_flag(local, tz))
    return f.with_columns(
        _flag=pl.when(pl.col("_ts").is_not_null()).then(flag).otherwise("_zf")
    ).drop(*_TS_PARTS, "_zf")


_LAYER = {
    "_ts": pl.Datetime("us"),
    "_host": pl.String,
    "_flag": pl.String,
    "_body": pl.String,
    "_up": pl.Float64,
    "_shape": pl.String,
}


def _one_layer(frame: pl.DataFrame, text: str, ctx: ParseContext) -> pl.DataFrame:
    """The first shape matching column ``text``: ``_ts``, ``_host``, ``_flag``, ``_body``, ``_up``
    (boot-relative seconds) and ``_shape`` (its name; null where none does). The common syslog
    head is read by slicing (``FAST_SYSLOG``); of the other lines, those with any shape are told
    apart by plain matches (DFAs, no groups), and the groups extracted only on each shape's
    lines, over the head alone. Row order is not kept."""
    col = pl.col(text)
    f = frame.with_columns(_head=col.str.extract(FAST_SYSLOG, 0))
    fast = f.filter(pl.col("_head").is_not_null())
    f = f.filter(pl.col("_head").is_null()).drop("_head")
    shaped = col.str.contains(_ANY_SHAPE).fill_null(False)
    f = f.with_columns(_any=shaped)
    parts = [
        f.filter(~pl.col("_any"))
        .drop("_any")
        .with_columns(pl.lit(None, dtype).alias(name) for name, dtype in _LAYER.items())
    ]
    if fast.height:
        parts.append(_fast_syslog(fast, text, ctx))
    f = f.filter("_any").drop("_any")
    which = pl.coalesce(
        [pl.when(col.str.contains(rx)).then(pl.lit(i)) for i, rx in enumerate(SHAPES.values())]
    )
    f = f.with_columns(_which=which)
    for i, name in enumerate(SHAPES):
        sub = f.filter(pl.col("_which") == i)
        if sub.height:
            parts.append(_shape_groups(sub, name, text, ctx).drop("_which"))
    return pl.concat([p.select(*frame.columns, *_LAYER) for p in parts], how="vertical_relaxed")


def _fast_syslog(fast: pl.DataFrame, text: str, ctx: ParseContext) -> pl.DataFrame:
    """``_one_layer``'s columns of lines matching ``FAST_SYSLOG`` (their head in ``_head``): month,
    day and time at fixed offsets, the host up to the space after it."""
    col = pl.col(text)
    after_stamp = pl.col("_head").str.slice(16)
    parts = {
        "mon": col.str.slice(0, 3),
        "day": col.str.slice(4, 2).str.strip_chars_start(" "),
        "hms": col,
    }
    return _with_syslog_ts(fast, parts, list(_ENGLISH_MONTH_NAMES), ctx, hms_at=7).with_columns(
        _host=after_stamp.str.slice(0, after_stamp.str.find(" ", literal=True)),
        _body=col.str.strip_prefix(pl.col("_head")),
        _up=pl.lit(None, pl.Float64),
        _shape=pl.lit("syslog"),
    )


def _shape_groups(sub: pl.DataFrame, name: str, text: str, ctx: ParseContext) -> pl.DataFrame:
    """``_one_layer``'s columns of lines of shape ``name``, from its regex groups."""
    col = pl.col(text)
    sub = sub.with_columns(_g=col.str.extract_groups(CAPTURES[name]))
    g = pl.col("_g")
    if name == "syslog":
        tokens = sub.get_column("_g").struct.field("mon").drop_nulls().unique().to_list()
        fields = {k: g.struct.field(k) for k in ("mon", "day", "hms", "frac")}
        sub = _with_syslog_ts(sub, fields, tokens, ctx)
    elif name == "full":
        parts = (g.struct.field(k) for k in ("date", "hms", "frac", "zone"))
        ts, flag = zoned_ts(*parts, site=zone_of(ctx))
        sub = sub.with_columns(_ts=ts, _flag=flag)
    elif name == "unix":
        ts = epoch_us(g.struct.field("epoch"), g.struct.field("frac"))
        sub = sub.with_columns(_ts=ts, _flag=pl.lit(None, pl.String))
    elif name == "mono":
        sub = sub.with_columns(_ts=pl.lit(None, pl.Datetime("us")), _flag=pl.lit("boot_relative"))
    else:
        ts, flag = _iso_ts(g, zone_of(ctx))
        sub = sub.with_columns(_ts=ts, _flag=flag)
    up = g.struct.field("up").cast(pl.Float64) if name == "mono" else pl.lit(None, pl.Float64)
    sub = sub.with_columns(
        _host=g.struct.field("host") if "(?P<host>" in SHAPES[name] else pl.lit(None, pl.String),
        _body=col.str.strip_prefix(g.struct.field("head")),
        _up=up,
        _shape=pl.lit(name),
    )
    return sub.drop("_g")


def nodes_of(frame: pl.DataFrame, host: str) -> pl.Series:
    """``node_expr`` of a host column, computed once per distinct value (a file names few hosts:
    the regexes are then run a handful of times, not on every row)."""
    hosts = frame.get_column(host)
    values = hosts.drop_nulls().unique()
    if not values.len():
        return pl.Series(hosts.name, [None] * hosts.len(), dtype=pl.String)
    nodes = pl.DataFrame({"h": values}).select(node_expr(pl.col("h"))).to_series()
    return hosts.replace_strict(values, nodes, default=None, return_dtype=pl.String)


def prefix_frame(frame: pl.DataFrame, ctx: ParseContext, column: str = "raw") -> pl.DataFrame:
    """``frame`` with ``p_ts`` (UTC), ``p_host`` (normalized), ``p_flag``, ``p_up`` (boot-relative
    seconds), ``body`` (the message after every recognized outer prefix; the line itself when
    none is), ``p_shape`` (the outer shape's name) and ``p_nested`` (two prefixes were read). Two
    layers are read: a collector's stamp around a syslog line gives the stamp's time and the
    syslog host. Row order is kept."""
    f = (
        _one_layer(frame.with_row_index("_row"), column, ctx)
        .rename({"_ts": "_ts1", "_host": "_h1", "_flag": "_f1", "_body": "_b1", "_up": "_up1"})
        .rename({"_shape": "p_shape"})
    )
    outer = f.filter(pl.col("_b1").is_not_null())  # only these can hold a second prefix
    inner = _one_layer(outer, "_b1", ctx)
    rest = f.filter(pl.col("_b1").is_null()).with_columns(
        pl.lit(None, dtype).alias(name) for name, dtype in _LAYER.items()
    )
    f = pl.concat([inner, rest], how="vertical_relaxed").sort("_row")
    f = f.with_columns(_hosts=pl.coalesce("_h1", "_host"))
    # the flag of the layer whose time is taken; with no time, the outer layer's (boot_relative,
    # tz_unknown) first
    flag = (
        pl.when(pl.col("_ts1").is_not_null())
        .then("_f1")
        .when(pl.col("_ts").is_not_null())
        .then("_flag")
        .otherwise(pl.coalesce("_f1", "_flag"))
    )
    return f.with_columns(
        p_ts=pl.coalesce("_ts1", "_ts"),
        p_host=nodes_of(f, "_hosts"),
        p_flag=flag,
        p_up=pl.coalesce("_up1", "_up"),
        body=pl.coalesce("_body", "_b1", column),
        p_nested=pl.col("_ts1").is_not_null() & pl.col("_body").is_not_null(),
    ).drop(
        "_row", "_ts1", "_h1", "_f1", "_b1", "_up1", "_ts", "_host", "_flag", "_body", "_up",
        "_shape", "_hosts",
    )  # fmt: skip


def fill_events(events: pl.DataFrame, pre: pl.DataFrame) -> pl.DataFrame:
    """Events whose parser found no time or node get the prefix's (``pre``: ``line``, ``p_ts``,
    ``p_host``, ``p_flag``, ``p_up``; the first row of a line counts); a time so found takes the
    prefix's flag. An event with neither a time nor a stamp of its own (``no_ts``) takes a
    prefix's boot-relative seconds, or its reason for no time (``tz_unknown``)."""
    if events.height == 0:
        return events
    lines = pre.get_column("line")
    if pre.height and not lines.null_count() and (lines.diff().drop_nulls() > 0).all():
        # in line order, each line once: each event's prefix row by binary search (not a hash
        # join copying every event column)
        at = lines.search_sorted(events.get_column("line"), side="left").cast(pl.Int64)
        at = at.clip(upper_bound=pre.height - 1)
        hit = (lines.gather(at) == events.get_column("line")).fill_null(False)
        found = pre.select(pl.col(c).gather(at) for c in _FILL)
        joined = events.with_columns(
            found.select(pl.when(hit).then(pl.col(c)) for c in _FILL).get_columns()
        )
    else:
        lookup = pre.select("line", *_FILL).unique("line", keep="first")
        joined = events.join(lookup, on="line", how="left")
    filled = pl.col("ts").is_null() & pl.col("p_ts").is_not_null()
    unstamped = (
        pl.col("ts").is_null()
        & pl.col("p_ts").is_null()
        & pl.col("uptime_s").is_null()
        & pl.col("p_flag").is_not_null()
    )
    return joined.with_columns(
        ts=pl.coalesce("ts", "p_ts"),
        ts_flag=pl.when(filled | unstamped).then("p_flag").otherwise("ts_flag"),
        uptime_s=pl.when(unstamped).then("p_up").otherwise("uptime_s"),
        node=pl.coalesce("node", "p_host"),
    ).drop(*_FILL)

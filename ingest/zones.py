"""The site's time zone for stamps that carry none (``--tz``, ``[ingest] tz``), or each group of
files' (``--tz-path GLOB=ZONE``, ``[ingest.tz_paths]``: a fleet spread over regions), or each
group of hosts' in one file (``--tz-host GLOB=ZONE``, ``[ingest.tz_hosts]``: a central syslog
file where nodes of several regions write their own wall clock; ``ingest.lines``).

Most log stamps say no zone: RFC 3164 syslog, ISO 8601 without an offset, ``dmesg -T``, glog,
Slurm's ``iso8601``, ``sacct``'s times, nvidia-smi's ``Timestamp``. Without ``tz`` they are read
as UTC; with ``tz`` (an IANA name such as ``Europe/Berlin``, ``America/Chicago``) as that zone's
wall clock, converted to UTC, daylight saving time included. A stamp that carries a zone or an
offset is read exactly whatever ``tz`` says, and so are Unix times.

Two wall-clock readings have no single answer, and are not guessed: the hour a zone turns its
clocks back happens twice (``tz_ambiguous``: which of the two a line means, its stamp does not
say), and the hour it skips never happens (``tz_gap``: the stamp is not that zone's). Such a time
is left null, the event kept and flagged, as for any other time that cannot be known.

``localize`` / ``zone_flag`` work on polars expressions, ``to_utc`` on one value.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import polars as pl

AMBIGUOUS = "tz_ambiguous"
GAP = "tz_gap"
# zone names that are UTC itself: nothing to convert
_UTC_NAMES = frozenset({"UTC", "Etc/UTC", "Etc/UCT", "UCT", "Etc/Universal", "Universal", "Zulu"})


def check_zone(name: str | None) -> str | None:
    """``name`` when it is a time zone this machine knows (IANA, e.g. ``Europe/Berlin``); None
    for none; ValueError (with what to give instead) otherwise."""
    if name is None or not str(name).strip():
        return None
    name = str(name).strip()
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as e:
        raise ValueError(
            f"unknown time zone {name!r}: give an IANA name such as Europe/Berlin, "
            "America/Chicago or UTC (`timedatectl list-timezones` lists them)"
        ) from e
    return name


def _checked(pairs: Iterable[tuple[str, str]], what: str) -> list[tuple[str, str]]:
    """``(GLOB, ZONE)`` pairs stripped, every zone checked: ValueError naming the pair (``what``:
    the kind of pattern) otherwise."""
    out = []
    for glob, name in pairs:
        glob = str(glob).strip()
        if not glob:
            raise ValueError(f"an empty {what} pattern for zone {name!r}: give GLOB=ZONE")
        try:
            zone = check_zone(name)
        except ValueError as e:
            raise ValueError(f"{glob}={name}: {e}") from e
        if zone is None:
            raise ValueError(f"no zone for {glob!r}: give GLOB=ZONE")
        out.append((glob, zone))
    return out


def zone_paths(pairs: Iterable[tuple[str, str]], base: str | Path) -> list[tuple[str, str]]:
    """``(GLOB, ZONE)`` pairs (``--tz-path``, ``[ingest.tz_paths]``) with every zone checked
    (ValueError naming the pair otherwise) and every relative glob taken from ``base``; a glob
    that starts with ``*`` is kept as it is (it matches anywhere)."""
    return [
        (g if g.startswith("*") or os.path.isabs(g) else os.path.join(str(base), g), zone)
        for g, zone in _checked(pairs, "path")
    ]


def zone_hosts(pairs: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """``(GLOB, ZONE)`` pairs of host names (``--tz-host``, ``[ingest.tz_hosts]``) with every
    zone checked (ValueError naming the pair otherwise); the globs in lower case, as node names
    are kept."""
    return [(g.lower(), zone) for g, zone in _checked(pairs, "host")]


def zone_options(
    tz: str | None, tz_paths: list[tuple[str, str]], tz_hosts: list[tuple[str, str]] | None = None
) -> dict[str, Any]:
    """The parse options that carry the zones (checked ones): ``tz``, ``tz_paths`` and
    ``tz_hosts``, each only when given (what ``ingest`` and ``run`` hand the pipeline)."""
    return (
        ({"tz": tz} if tz else {})
        | ({"tz_paths": tz_paths} if tz_paths else {})
        | ({"tz_hosts": tz_hosts} if tz_hosts else {})
    )


def host_zone(hosts: pl.Expr, ctx: Any) -> pl.Expr | None:
    """The zone of each host (node name) by ``tz_hosts``: the first glob it matches, else null;
    None when no host zones are given."""
    pairs = (getattr(ctx, "options", None) or {}).get("tz_hosts") or ()
    if not pairs:
        return None
    out: Any = pl
    for glob, zone in pairs:
        out = out.when(hosts.str.contains(host_regex(glob))).then(pl.lit(zone))
    return out.otherwise(pl.lit(None, pl.String))


def host_regex(glob: str) -> str:
    """A host glob (``*`` any run of characters, ``?`` one) as a whole-name regex."""
    parts = (
        ".*" if c == "*" else "." if c == "?" else c if c.isalnum() else f"\\x{{{ord(c):x}}}"
        for c in glob
    )
    return "^" + "".join(parts) + "$"


def rezone(
    ts: pl.Expr, zone: pl.Expr, flag: pl.Expr, zones: Iterable[str], tz: str | None
) -> tuple[pl.Expr, pl.Expr]:
    """``ts`` (UTC of a wall clock read in ``tz``) read instead in each row's ``zone`` (one of
    ``zones``), and ``flag`` with ``tz_ambiguous`` / ``tz_gap`` where that zone has the wall
    clock twice or never (the time then null); both unchanged where ``zone`` is null or ``tz``."""
    local = ts if tz is None else to_local(ts, tz)
    moved: Any = pl
    why: Any = pl
    for z in dict.fromkeys(zones):
        if z != tz:
            moved = moved.when(zone == z).then(localize(local, z))
            why = why.when(zone == z).then(zone_flag(local, z))
    if moved is pl:
        return ts, flag
    moved = moved.otherwise(ts)
    lost = zone.is_not_null() & ts.is_not_null() & moved.is_null()
    return moved, pl.when(lost).then(why.otherwise(pl.lit(None, pl.String))).otherwise(flag)


def zone_for_path(path: str, options: dict[str, Any]) -> str | None:
    """The zone a file's zone-less stamps are in: the first ``tz_paths`` glob that matches its
    absolute path (``*`` crosses folders), else ``options["tz"]``."""
    for glob, zone in options.get("tz_paths") or ():
        if fnmatch.fnmatchcase(path, glob):
            return zone
    return options.get("tz")


def zone_of(ctx: Any) -> str | None:
    """The zone a parse context's zone-less stamps are in; None for UTC."""
    options = getattr(ctx, "options", None) or {}
    tz = options.get("tz")
    if not tz or str(tz) in _UTC_NAMES:
        return None
    return str(tz)


def localize(ts: pl.Expr, tz: str | None) -> pl.Expr:
    """Naive wall-clock times of ``tz`` -> naive UTC (unchanged without ``tz``); null where the
    wall clock is ambiguous or skipped (``zone_flag`` says which)."""
    if not tz:
        return ts
    return (
        ts.dt.replace_time_zone(tz, ambiguous="null", non_existent="null")
        .dt.convert_time_zone("UTC")
        .dt.replace_time_zone(None)
    )


def to_local(ts: pl.Expr, tz: str) -> pl.Expr:
    """Naive UTC -> the naive wall clock of ``tz`` (``localize``'s inverse where it is defined)."""
    return ts.dt.replace_time_zone("UTC").dt.convert_time_zone(tz).dt.replace_time_zone(None)


def zone_flag(ts: pl.Expr, tz: str | None) -> pl.Expr:
    """``tz_ambiguous`` / ``tz_gap`` where ``localize(ts, tz)`` is null for a non-null ``ts``;
    null elsewhere (and everywhere without ``tz``)."""
    if not tz:
        return pl.lit(None, pl.String)
    early = ts.dt.replace_time_zone(tz, ambiguous="earliest", non_existent="null")
    late = ts.dt.replace_time_zone(tz, ambiguous="latest", non_existent="null")
    return (
        pl.when(ts.is_not_null() & early.is_null())
        .then(pl.lit(GAP))
        .when(early != late)
        .then(pl.lit(AMBIGUOUS))
        .otherwise(pl.lit(None, pl.String))
    )


def to_utc(dt: datetime | None, tz: str | None) -> tuple[datetime | None, str | None]:
    """(naive UTC, flag) of one naive wall-clock time of ``tz`` (unchanged without ``tz``)."""
    if dt is None or not tz:
        return dt, None
    zone = ZoneInfo(tz)
    first, second = dt.replace(tzinfo=zone, fold=0), dt.replace(tzinfo=zone, fold=1)
    utc = first.astimezone(UTC)
    if utc.astimezone(zone).replace(tzinfo=None) != dt:
        return None, GAP
    if first.utcoffset() != second.utcoffset():
        return None, AMBIGUOUS
    return utc.replace(tzinfo=None), None

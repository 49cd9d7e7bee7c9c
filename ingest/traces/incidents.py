"""Incident records -> ``incidents`` + ``incident`` events + the fleet's ``nodes``.

Sites keep failure tickets and repair logs; public failure data sets have the same shape. The
reader follows the shape, not one file:

- **Containers**: CSV (any delimiter the ``csv`` sniffer finds), a JSON document (an array of
  objects, or an object holding one under any key), JSON lines. Nested objects are flattened
  (``{"category": {"level": ..., "class": ...}}`` -> ``category.level`` / ``category.class``).
- **Rows**: one row per incident (node, start, end or a duration, level / class / description),
  or paired start / end events keyed by node (an ``event`` column saying which) - each start is
  paired with the next end on its node.
- **Columns** are found by name (``ALIASES``: ``node`` / ``host`` / ``location``, ``start`` /
  ``Prob Started`` / ``failure_time``, ``end`` / ``Prob Fixed`` / ``resolved``, ``Down Time`` /
  ``duration_h``, ...); ``ctx.options["map"]`` (``ingest --map start=opened,node=server``)
  names the rest. Categories written as one column per level, the cause in the non-empty one
  (LANL: ``Facilities, Hardware, Human Error, Network, Undetermined, Software``), are read
  whole: the column is the level, its text the class.
- **Times**: ISO stamps (``T`` or a space; a zone after the clock, ``+01:00``, ``+0100``,
  `` +01:00``, ``Z``, ``UTC``, makes the time that exact instant whatever ``tz`` says),
  ``m/d/yyyy h:mm``, BlueGene/L's ``2005-06-03-15.42.50.675872``, Unix seconds, or offsets
  from ``--epoch``
  (``ctx.options["epoch"]``) in seconds, hours or days (the column's suffix ``_s`` / ``_h`` /
  ``_d``, or ``--map time_unit=h``). Of several columns named like a start (``Time`` and
  ``Timestamp``), the one whose values read as times for the most rows is the start (Unix
  seconds before a wall clock of no zone, when both read). Durations default to minutes for a
  ``down time`` column, else hours, unless their suffix or ``--map duration_unit`` says
  otherwise.
- **Nodes**: normalized; a bare node number is prefixed with its system / partition
  (``2-n17``). A ``nodes`` column giving the system's size adds the whole system to the fleet.

Every incident gets a category of the taxonomy (``IncidentCategory``) from its level, class and
description (``categorize``); hardware categories are ``critical`` failures, other failures
``error``, and a record whose severity says warning / degraded / minor stays a ``warning``
(a ``level`` column of log levels, ``INFO`` / ``FATAL``, is read as the severity).
A row without a node or a start time is quarantined; header lines and empty lines are noise.

Times that name no zone are the site's wall clock: UTC unless ``tz``. A start ``tz`` has twice
(the hour its clocks go back) or never (the hour they skip) is not guessed: the record is
quarantined, as one without a readable start, with ``tz_ambiguous`` / ``tz_gap`` in the reason
(so is a start / end event of paired records); such an end leaves the incident's ``end`` null
(or start + duration where the record gives one) and says so in its ``attrs`` (``end_flag``).
"""

from __future__ import annotations

import io
import json
import logging
import re
from datetime import datetime
from typing import Any

import polars as pl

from faultlens.ingest.base import ChunkResult, ParseContext, quarantine_frame
from faultlens.ingest.errors import InputError
from faultlens.ingest.schema import SITE_DATASET, TS, Kind, Source
from faultlens.ingest.traces.incident_shapes import (
    ALIASES,
    LEVEL_COLUMNS,
    LOG_LEVEL_RE,
    categorize_expr,
    duration_unit,
    node_name_expr,
    parse_times,
    severity_expr,
    slug,
    zoned_times,
)
from faultlens.ingest.zones import zone_of

log = logging.getLogger(__name__)

_START_RE = r"(?i)^(start|begin|down|fail|failed|failure|open|opened|out)"
_END_RE = r"(?i)^(end|stop|up|resolved?|repaired?|clos|fixed|recover|back|in)"


def _dataset(ctx: ParseContext) -> str:
    return str(ctx.options.get("dataset") or SITE_DATASET)


def _mapping(ctx: ParseContext) -> dict[str, str]:
    raw = ctx.options.get("map") or {}
    if isinstance(raw, str):
        raw = dict(p.split("=", 1) for p in raw.split(",") if "=" in p)
    return {k.strip(): v.strip() for k, v in raw.items()}


# -- reading the container -------------------------------------------------------------------------
def read_records(lines: pl.Series, first_line: int) -> tuple[pl.DataFrame, pl.Series, int]:
    """The records of a file as a frame of strings, their line numbers, and how many lines they
    took (records plus the header)."""
    frame = pl.DataFrame({"raw": lines}).with_row_index("i").drop_nulls("raw")
    frame = frame.filter(pl.col("raw").str.strip_chars() != "")
    if frame.height == 0:
        return pl.DataFrame(), pl.Series("line", [], pl.Int64), 0
    text = frame["raw"]
    first = text[0].lstrip()
    if first.startswith("{") and _is_json_lines(text):
        recs = [json.loads(x) for x in text.to_list()]
        return _flat(recs), (frame["i"].cast(pl.Int64) + first_line).alias("line"), frame.height
    if first.startswith(("[", "{")):
        try:
            doc = json.loads("\n".join(text.to_list()))
        except ValueError as e:
            raise InputError(f"broken JSON document: {e}") from e
        recs = _records_in(doc)
        line = pl.Series("line", [first_line + int(frame["i"][0])] * len(recs), pl.Int64)
        return _flat(recs), line, frame.height
    body = "\n".join(text.to_list())
    try:
        table = pl.read_csv(
            io.StringIO(body),
            infer_schema=False,
            separator=_delimiter(text[0]),
            truncate_ragged_lines=True,
        )
    except pl.exceptions.PolarsError as e:
        raise InputError(f"cannot read the records as CSV: {e}") from e
    lines_out = frame["i"].cast(pl.Int64).slice(1) + first_line
    if lines_out.len() != table.height:  # quoted newlines: rows no longer map to lines
        lines_out = pl.Series([None] * table.height, dtype=pl.Int64)
    return table, lines_out.alias("line"), frame.height


def _is_json_lines(text: pl.Series) -> bool:
    try:
        json.loads(text[0])
    except ValueError:
        return False
    return True


def _records_in(doc: Any) -> list[dict[str, Any]]:
    if isinstance(doc, list):
        return [r for r in doc if isinstance(r, dict)]
    if isinstance(doc, dict):
        for value in doc.values():
            if isinstance(value, list) and value and isinstance(value[0], dict):
                return value
        return [doc]
    return []


def _flat(records: list[dict[str, Any]]) -> pl.DataFrame:
    if not records:
        return pl.DataFrame()
    frame = pl.json_normalize(records, separator=".", infer_schema_length=None)
    return frame.select(pl.all().cast(pl.String))


def _delimiter(header: str) -> str:
    counts = {d: header.count(d) for d in (",", ";", "\t", "|")}
    return max(counts, key=lambda d: counts[d])


# -- finding the columns ---------------------------------------------------------------------
def resolve_columns(columns: list[str], mapping: dict[str, str]) -> dict[str, str]:
    """Role (node, start, end, ...) -> the file's column, by ``mapping`` first, then by name."""
    by_slug = {slug(c): c for c in columns}
    out: dict[str, str] = {}
    for role, col in mapping.items():
        if role in ALIASES and col in columns:
            out[role] = col
        elif role in ALIASES and slug(col) in by_slug:
            out[role] = by_slug[slug(col)]
    taken = set(out.values())
    for role, names in ALIASES.items():
        if role in out:
            continue
        for name in names:
            col = by_slug.get(name)
            if col is not None and col not in taken:
                out[role] = col
                taken.add(col)
                break
    return out


def level_columns(columns: list[str], mapping: dict[str, str]) -> list[str]:
    if "levels" in mapping:
        wanted = {slug(x) for x in mapping["levels"].split(";") if x}
        return [c for c in columns if slug(c) in wanted]
    return [c for c in columns if slug(c) in LEVEL_COLUMNS]


def looks_like_incidents(columns: list[str]) -> float:
    """How sure (0..1) a header is one of incident records."""
    roles = resolve_columns(columns, {})
    levels = level_columns(columns, {})
    if "node" not in roles or "start" not in roles:
        return 0.0
    if any(slug(c) in {"job_id", "jobid", "job_name", "pod_phase", "gpu_num"} for c in columns):
        return 0.0
    score = 0.3
    score += 0.2 if ("end" in roles or "duration" in roles) else 0.0
    score += 0.2 if (levels or "level" in roles or "class" in roles) else 0.0
    score += 0.1 if "description" in roles else 0.0
    score += 0.15 if len(levels) >= 3 else 0.0
    return min(score, 0.95)


# -- building the rows -----------------------------------------------------------------------
def _text(frame: pl.DataFrame, col: str | None) -> pl.Expr:
    if col is None or col not in frame.columns:
        return pl.lit(None, pl.String)
    stripped = pl.col(col).cast(pl.String).str.strip_chars()
    return pl.when(stripped == "").then(None).otherwise(stripped)


def _levels(frame: pl.DataFrame, cols: list[str]) -> tuple[pl.Expr, pl.Expr]:
    """(level, class) from one-column-per-level categories: the first non-empty column."""
    level = pl.coalesce([pl.when(_text(frame, c).is_not_null()).then(pl.lit(c)) for c in cols])
    klass = pl.coalesce([_text(frame, c) for c in cols])
    return level, klass


def incident_frame(
    table: pl.DataFrame, lines: pl.Series, ctx: ParseContext
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(incidents, quarantined rows) of a records frame."""
    mapping = _mapping(ctx)
    cols = table.columns
    roles = resolve_columns(cols, mapping)
    levels = level_columns(cols, mapping)
    epoch = _epoch(ctx)
    unit = mapping.get("time_unit")
    frame = table.with_columns(lines.alias("_line"))
    if "start" not in mapping and (readable := _readable_start(frame, cols, roles, epoch, unit)):
        roles["start"] = readable  # of the columns that could be the start, the one that reads
    start_unit = unit or duration_unit(roles.get("start", ""), default="s")
    tz = zone_of(ctx)
    start, start_flag = zoned_times(_text(frame, roles.get("start")), epoch, start_unit, tz)
    end, end_flag = zoned_times(_text(frame, roles.get("end")), epoch, unit or start_unit, tz)
    flags = {"start_flag": start_flag, "end_flag": end_flag} if tz else {}
    dur_col = roles.get("duration")
    dur_unit = mapping.get("duration_unit") or duration_unit(dur_col or "", default="")
    if not dur_unit:
        dur_unit = "min" if dur_col and "down" in slug(dur_col) else "h"
    per_h = {"s": 1 / 3600, "min": 1 / 60, "h": 1.0, "d": 24.0}[dur_unit]
    dur_h = _text(frame, dur_col).cast(pl.Float64, strict=False) * per_h
    if levels:
        level, klass = _levels(frame, levels)
        level = pl.coalesce([level, _text(frame, roles.get("level"))])
        klass = pl.coalesce([klass, _text(frame, roles.get("class"))])
    else:
        level, klass = _text(frame, roles.get("level")), _text(frame, roles.get("class"))
    out = frame.select(
        node=node_name_expr(_text(frame, roles.get("node")), _text(frame, roles.get("partition"))),
        gpu=_text(frame, roles.get("gpu")),
        start=start,
        end=end,
        dur_h=dur_h,
        level=level,
        **{"class": klass},
        description=_text(frame, roles.get("description")),
        sev_text=pl.coalesce(
            [_text(frame, roles.get("severity")), _log_level(_text(frame, roles.get("level")))]
        ),
        event=_text(frame, roles.get("event")),
        partition=_text(frame, roles.get("partition")),
        rack=_text(frame, roles.get("rack")),
        fleet=_text(frame, roles.get("fleet_size")).cast(pl.Int64, strict=False),
        line=pl.col("_line"),
        raw=pl.concat_str([pl.col(c).fill_null("") for c in cols], separator=","),
        **flags,
    )
    unplaced = out.head(0)
    if tz:  # a time the zone cannot place: quarantined as an unreadable start
        unplaced = out.filter(pl.col("node").is_not_null() & pl.col("start_flag").is_not_null())
        out = out.filter(pl.col("node").is_null() | pl.col("start_flag").is_null())
    if "event" in roles and "end" not in roles:
        out = pair_events(out)
    bad = out.filter(pl.col("node").is_null() | pl.col("start").is_null())
    reasons = pl.when(pl.col("node").is_null()).then(pl.lit("incident without a node"))
    reasons = reasons.otherwise(pl.lit("incident without a readable start time"))
    quarantined = bad.select("line", pl.col("raw"), reasons.alias("reason"))
    if unplaced.height:
        said = pl.concat_str(
            [pl.lit("incident time not in "), pl.lit(f"{tz} ("), pl.col("start_flag"),
             pl.lit("): the hour its clocks change")]
        )  # fmt: skip
        quarantined = pl.concat(
            [quarantined, unplaced.select("line", pl.col("raw"), said.alias("reason"))]
        ).sort("line")
    good = out.filter(pl.col("node").is_not_null() & pl.col("start").is_not_null())
    repair_h = pl.coalesce(
        [(pl.col("end") - pl.col("start")).dt.total_seconds() / 3600.0, pl.col("dur_h")]
    )
    good = good.with_columns(
        end=pl.coalesce(
            [pl.col("end"), pl.col("start") + pl.duration(seconds=pl.col("dur_h") * 3600.0)]
        ),
        repair_h=repair_h,
        category=categorize_expr(pl.col("level"), pl.col("class"), pl.col("description")),
    ).with_columns(severity=severity_expr(pl.col("category"), pl.col("sev_text")))
    return good, quarantined


def _readable_start(
    frame: pl.DataFrame,
    cols: list[str],
    roles: dict[str, str],
    epoch: datetime | None,
    unit: str | None,
) -> str | None:
    """Of two or more columns named like a start (``ALIASES["start"]``, in its order) and not
    taken by another role, the one whose values read as times most often; None when there is
    no choice to make or none reads (``resolve_columns``' pick by name stands). A log table's
    ``Time`` may hold a form no reader knows beside a ``Timestamp`` of Unix seconds (Loghub's
    BlueGene/L records); the first name alone would lose every row."""
    taken = {c for r, c in roles.items() if r != "start"}
    by_slug = {slug(c): c for c in cols}
    options = [by_slug[n] for n in ALIASES["start"] if n in by_slug and by_slug[n] not in taken]
    if len(options) < 2:
        return None
    read = frame.select(
        [
            parse_times(_text(frame, c), epoch, unit or duration_unit(c, default="s"))
            .is_not_null()
            .sum()
            .alias(f"t{i}")
            for i, c in enumerate(options)
        ]
        + [
            _text(frame, c).cast(pl.Float64, strict=False).is_not_null().sum().alias(f"n{i}")
            for i, c in enumerate(options)
        ]
    ).row(0, named=True)
    # as many rows read either way: Unix seconds (or offsets from --epoch) before a wall-clock
    # form, which names no zone (BlueGene/L's ``Time`` is the site's local time)
    best = max(range(len(options)), key=lambda i: (read[f"t{i}"], read[f"n{i}"], -i))
    return options[best] if read[f"t{best}"] else None


def _log_level(level: pl.Expr) -> pl.Expr:
    """A ``level`` column holding log levels (``INFO``, ``WARNING``, ``FATAL``) says the record's
    severity; a category level (``Hardware``) does not."""
    return pl.when(level.str.contains(LOG_LEVEL_RE).fill_null(False)).then(level)


def pair_events(frame: pl.DataFrame) -> pl.DataFrame:
    """Paired start / end records -> one row per incident: each start with the next end on its
    node (an end without a start is dropped; a start without an end stays open)."""
    is_start = pl.col("event").str.contains(_START_RE).fill_null(False)
    is_end = pl.col("event").str.contains(_END_RE).fill_null(False) & ~is_start
    starts = frame.filter(is_start).drop("end").sort("start")
    ends = (
        frame.filter(is_end).select("node", pl.col("start").alias("end")).drop_nulls().sort("end")
    )
    paired = starts.drop_nulls(["node", "start"]).join_asof(
        ends,
        left_on="start",
        right_on="end",
        by="node",
        strategy="forward",
        check_sortedness=False,
    )
    nulls = starts.filter(pl.col("node").is_null() | pl.col("start").is_null())
    nulls = nulls.with_columns(pl.lit(None, TS).alias("end")).select(paired.columns)
    return pl.concat([paired, nulls])


def _epoch(ctx: ParseContext) -> datetime | None:
    value = ctx.options.get("epoch")
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).replace(tzinfo=None)


def rows_of(good: pl.DataFrame, ctx: ParseContext) -> dict[str, pl.DataFrame]:
    """The ``incidents``, ``events`` and ``nodes`` rows of parsed incidents."""
    dataset = _dataset(ctx)
    file = pl.lit(ctx.file)
    incidents = good.select(
        pl.lit(dataset).alias("dataset"),
        "node",
        "gpu",
        "start",
        "end",
        "repair_h",
        "level",
        "class",
        "description",
        "category",
        "severity",
        file.alias("file"),
        "line",
    )
    if "end_flag" in good.columns:  # with tz: why a printed end is null
        end_attrs = pl.when(pl.col("end_flag").is_not_null()).then(
            pl.struct(end_flag=pl.col("end_flag")).struct.json_encode()
        )
        incidents = incidents.with_columns(good.select(end_attrs.alias("attrs")))
    label = pl.concat_str(
        [pl.col("level").fill_null("?"), pl.col("class").fill_null("-")], separator=" / "
    )
    message = pl.when(pl.col("description").is_not_null())
    message = message.then(pl.concat_str([label, pl.col("description")], separator=": "))
    attrs = pl.struct(
        repair_h=pl.col("repair_h"),
        level=pl.col("level"),
        **{"class": pl.col("class")},
        dataset=pl.lit(dataset),
    ).struct.json_encode()
    events = incident_events(good, message.otherwise(label), attrs, file)
    return {"incidents": incidents, "events": events, "nodes": fleet_rows(good, dataset, ctx)}


def incident_events(
    frame: pl.DataFrame, message: pl.Expr, attrs: pl.Expr, file: pl.Expr | None = None
) -> pl.DataFrame:
    """The ``incident`` event each record gives on its node (at its start, with its category)."""
    return frame.select(
        pl.col("start").alias("ts"),
        "node",
        "gpu",
        pl.lit(Source.INCIDENT.value).alias("source"),
        pl.lit(Kind.INCIDENT.value).alias("kind"),
        pl.col("category").alias("subkind"),
        "severity",
        message.alias("message"),
        attrs.alias("attrs"),
        (pl.col("file") if file is None else file).alias("file"),
        "line",
    )


def fleet_rows(good: pl.DataFrame, dataset: str, ctx: ParseContext) -> pl.DataFrame:
    """Nodes named by the incidents, dated by their first and last record; where a system's size
    is given (``nodes`` column), every node of it, numbered like the records' own."""
    seen = good.group_by("node").agg(
        pl.col("partition").drop_nulls().first(),
        pl.col("rack").drop_nulls().first(),
        pl.col("start").min().alias("first_seen"),
        pl.coalesce(["end", "start"]).max().alias("last_seen"),
    )
    systems = good.filter(pl.col("fleet").is_not_null() & pl.col("partition").is_not_null())
    if systems.height:
        span = systems.group_by("partition").agg(
            pl.col("fleet").max(),
            pl.col("start").min().alias("first_seen"),
            pl.coalesce(["end", "start"]).max().alias("last_seen"),
        )
        whole = (
            span.with_columns(pl.int_ranges(0, pl.col("fleet")).alias("n"))
            .explode("n")
            .drop_nulls("n")
            .select(
                node_name_expr(pl.col("n").cast(pl.String), pl.col("partition")).alias("node"),
                "partition",
                pl.lit(None, pl.String).alias("rack"),
                "first_seen",
                "last_seen",
            )
        )
        seen = pl.concat([whole, seen.filter(~pl.col("node").is_in(whole["node"].implode()))])
    return seen.select(
        pl.lit(dataset).alias("dataset"),
        "node",
        "partition",
        "rack",
        pl.lit(None, pl.Int32).alias("gpus"),
        "first_seen",
        "last_seen",
        pl.lit("incident").alias("source"),
        pl.lit(ctx.file).alias("file"),
    )


class IncidentParser:
    """Incident records in CSV / JSON / JSON lines (whole file, vectorized)."""

    name = "incidents"
    source = Source.INCIDENT
    whole_file = True
    max_line_bytes = 64 << 20

    def sniff(self, head_lines: list[str], path: str) -> float:
        lines = [x for x in head_lines if x.strip()]
        if not lines:
            return 0.0
        first = lines[0].lstrip()
        if first.startswith(("{", "[")):
            # a JSON document or JSON lines: judge the key names of the head (maybe truncated)
            keys = list(dict.fromkeys(re.findall(r'"([^"\\]{1,64})"\s*:', "\n".join(lines[:200]))))
            return looks_like_incidents(keys) * 0.9
        cols = pl.read_csv(
            io.StringIO(first), n_rows=0, infer_schema=False, separator=_delimiter(first)
        ).columns
        return looks_like_incidents(cols)

    def parse_line(self, line: str, ctx: ParseContext) -> Any:
        # the one-line path is the chunk path over a header-less line: not meaningful alone
        return None

    def new_state(self, ctx: ParseContext) -> None:
        return None

    def parse_chunk(
        self, lines: pl.Series, first_line: int, ctx: ParseContext, state: Any
    ) -> ChunkResult:
        table, line_nos, used = read_records(lines, first_line)
        if table.height == 0:
            return ChunkResult()
        good, bad = incident_frame(table, line_nos, ctx)
        quarantine = None
        if bad.height:
            quarantine = quarantine_frame(
                bad["line"].fill_null(first_line).to_list(),
                bad["raw"].to_list(),
                bad["reason"].to_list(),
            )
        n_records = table.height
        # a JSON document's lines all belong to its records; a CSV's records are one line each
        parsed = (used - bad.height) if line_nos.n_unique() == 1 else n_records - bad.height
        log.info("%s: %d incidents, %d quarantined", ctx.file, good.height, bad.height)
        return ChunkResult(tables=rows_of(good, ctx), parsed=max(parsed, 0), quarantine=quarantine)

    def finish(self, ctx: ParseContext, state: Any) -> ChunkResult:
        return ChunkResult()


PARSERS = [IncidentParser()]

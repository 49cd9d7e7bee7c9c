"""Replaceable-unit histories -> ``lifetimes`` + ``incidents`` + ``nodes``.

Two shapes (read by header name, so other fleets' unit histories read too):

- ``unit_residency``: one row per stay of a unit (GPU serial) in a location: ``SN`` / ``serial``
  / ``unit``, ``location`` / ``node``, ``insert``, ``remove``, optional ``duration`` (seconds),
  ``out`` (taken out of service) and ``event`` (why the stay ended: ORNL Titan's ``DBE`` double-bit
  ECC, ``OTB`` off the bus). Rows without ``insert`` are event-only records. Each row with an event
  is an incident on its location at ``remove`` (a DBE a GPU-memory failure, an OTB a GPU failure);
  every location is a node of the fleet from its first insert to its last remove, with one GPU
  (a location is one GPU slot); the rack is the location's cabinet (``c11-2`` of
  ``c11-2c1s4n1``). Stays are not lifetimes (a unit moves): ``unit_lifetimes`` gives those.
- ``unit_lifetimes``: one row per unit with its total time in service (``time`` seconds /
  ``years`` / ``days``), whether it died (``dead`` / ``failed``), the last sighting (``last``),
  optional ``batch`` and a death cause (``dead_dbe`` / ``dead_otb`` flags or a ``cause``) ->
  ``lifetimes`` (Kaplan-Meier and per-batch rates read them).

A data row without a unit or a readable time is quarantined; the header line is noise.
"""

from __future__ import annotations

import io
import logging
from typing import Any

import polars as pl

from faultlens.ingest.base import ChunkResult, ParseContext, node_expr, quarantine_frame
from faultlens.ingest.schema import SITE_DATASET, IncidentCategory, Severity, Source
from faultlens.ingest.traces.incident_shapes import parse_times, slug
from faultlens.ingest.traces.incidents import incident_events, read_records

log = logging.getLogger(__name__)

EVENT_CATEGORY = {
    "dbe": IncidentCategory.GPU_MEMORY.value,
    "sbe": IncidentCategory.GPU_MEMORY.value,
    "ecc": IncidentCategory.GPU_MEMORY.value,
    "otb": IncidentCategory.GPU.value,
    "xid": IncidentCategory.GPU.value,
}
_TRUE = ("true", "t", "yes", "y", "1")


def _col(frame: pl.DataFrame, *names: str) -> str | None:
    by = {slug(c): c for c in frame.columns}
    return next((by[n] for n in names if n in by), None)


def _text(frame: pl.DataFrame, col: str | None) -> pl.Expr:
    if col is None:
        return pl.lit(None, pl.String)
    s = pl.col(col).cast(pl.String).str.strip_chars()
    return pl.when(s == "").then(None).otherwise(s)


def _flag(frame: pl.DataFrame, col: str | None) -> pl.Expr:
    return _text(frame, col).str.to_lowercase().is_in(_TRUE).fill_null(False)


def _header(head_lines: list[str]) -> set[str]:
    first = next((x for x in head_lines if x.strip()), "")
    try:
        cols = pl.read_csv(io.StringIO(first), n_rows=0, infer_schema=False).columns
    except pl.exceptions.PolarsError:
        return set()
    return {slug(c) for c in cols}


_UNIT = ("sn", "serial", "serial_number", "unit", "gpu_serial")


class _Base:
    source = Source.INCIDENT
    whole_file = True

    def parse_line(self, line: str, ctx: ParseContext) -> Any:
        return None  # a row means nothing without its header: the chunk path is the parser

    def new_state(self, ctx: ParseContext) -> None:
        return None

    def finish(self, ctx: ParseContext, state: Any) -> ChunkResult:
        return ChunkResult()

    def parse_chunk(
        self, lines: pl.Series, first_line: int, ctx: ParseContext, state: Any
    ) -> ChunkResult:
        table, line_nos, _ = read_records(lines, first_line)
        if table.height == 0:
            return ChunkResult()
        frame = table.with_columns(line_nos.alias("_line"))
        tables, bad = self.rows(frame, ctx, str(ctx.options.get("dataset") or SITE_DATASET))
        q = None
        if bad.height:
            q = quarantine_frame(
                bad["_line"].fill_null(first_line).to_list(),
                bad["_raw"].to_list(),
                bad["_reason"].to_list(),
            )
        return ChunkResult(tables=tables, parsed=table.height - bad.height, quarantine=q)

    def rows(
        self, frame: pl.DataFrame, ctx: ParseContext, dataset: str
    ) -> tuple[dict[str, pl.DataFrame], pl.DataFrame]:
        raise NotImplementedError


def _bad(frame: pl.DataFrame, ok: pl.Series, reason: str) -> pl.DataFrame:
    """The rows of ``frame`` that ``ok`` rejects, with their text and ``reason``."""
    raw = pl.concat_str([pl.col(c).fill_null("") for c in frame.columns[:-1]], separator=",")
    return frame.filter(~ok).select("_line", raw.alias("_raw"), pl.lit(reason).alias("_reason"))


class ResidencyParser(_Base):
    name = "unit_residency"

    def sniff(self, head_lines: list[str], path: str) -> float:
        cols = _header(head_lines)
        has_unit = bool(cols & set(_UNIT))
        return 0.9 if has_unit and {"insert", "remove"} <= cols else 0.0

    def rows(
        self, frame: pl.DataFrame, ctx: ParseContext, dataset: str
    ) -> tuple[dict[str, pl.DataFrame], pl.DataFrame]:
        unit = _text(frame, _col(frame, *_UNIT))
        loc = _text(frame, _col(frame, "location", "node", "slot", "position"))
        insert = parse_times(_text(frame, _col(frame, "insert")), None, "s")
        remove = parse_times(_text(frame, _col(frame, "remove")), None, "s")
        event = _text(frame, _col(frame, "event", "cause", "failure"))
        out = frame.select(
            "_line",
            unit.alias("unit"),
            node_expr(loc).alias("node"),
            insert.alias("start"),
            remove.alias("end"),
            _flag(frame, _col(frame, "out", "removed_from_service")).alias("out"),
            event.alias("event"),
            loc.str.extract(r"^(c\d+-\d+)").alias("rack"),
        )
        ok = pl.col("unit").is_not_null() & pl.col("node").is_not_null()
        ok = ok & (pl.col("start").is_not_null() | pl.col("end").is_not_null())
        reason = "unit stay without a unit, location or time"
        bad = _bad(frame, out.select(ok).to_series(), reason)
        good = out.filter(ok)
        return self._tables(good, ctx, dataset), bad

    @staticmethod
    def _tables(good: pl.DataFrame, ctx: ParseContext, dataset: str) -> dict[str, pl.DataFrame]:
        file = pl.lit(ctx.file).alias("file")
        failed = good.filter(pl.col("event").is_not_null())
        cat = (
            pl.col("event")
            .str.to_lowercase()
            .replace_strict(EVENT_CATEGORY, default=IncidentCategory.UNKNOWN.value)
        )
        ts = pl.coalesce(["end", "start"])
        incidents = failed.select(
            pl.lit(dataset).alias("dataset"),
            "node",
            pl.col("unit").alias("gpu"),
            ts.alias("start"),
            pl.col("event").alias("level"),
            pl.col("event").alias("class"),
            pl.concat_str([pl.lit("unit "), pl.col("unit"), pl.lit(" "), pl.col("event")]).alias(
                "description"
            ),
            cat.alias("category"),
            pl.lit(Severity.CRITICAL.value).alias("severity"),
            pl.struct(out=pl.col("out")).struct.json_encode().alias("attrs"),
            file,
            pl.col("_line").alias("line"),
        )
        events = incident_events(
            incidents,
            pl.col("description"),
            pl.struct(level="level", dataset=pl.lit(dataset)).struct.json_encode(),
        )
        nodes = good.group_by("node").agg(
            pl.col("rack").drop_nulls().first(),
            pl.col("start").min().alias("first_seen"),
            pl.max_horizontal(pl.col("end").max(), pl.col("start").max()).alias("last_seen"),
        )
        nodes = nodes.select(
            pl.lit(dataset).alias("dataset"),
            "node",
            "rack",
            pl.lit(1, pl.Int32).alias("gpus"),
            "first_seen",
            "last_seen",
            pl.lit("residency").alias("source"),
            file,
        )
        return {"incidents": incidents, "events": events, "nodes": nodes}


class LifetimeParser(_Base):
    name = "unit_lifetimes"

    def sniff(self, head_lines: list[str], path: str) -> float:
        cols = _header(head_lines)
        has_unit = bool(cols & set(_UNIT))
        has_life = bool(cols & {"time", "years", "days", "life_h", "lifetime"})
        has_death = bool(cols & {"dead", "failed", "died"})
        return 0.85 if has_unit and has_life and has_death and "insert" not in cols else 0.0

    def rows(
        self, frame: pl.DataFrame, ctx: ParseContext, dataset: str
    ) -> tuple[dict[str, pl.DataFrame], pl.DataFrame]:
        unit = _text(frame, _col(frame, *_UNIT))
        life_h = pl.coalesce(
            [
                _text(frame, _col(frame, "time")).cast(pl.Float64, strict=False) / 3600.0,
                _text(frame, _col(frame, "life_h")).cast(pl.Float64, strict=False),
                _text(frame, _col(frame, "days")).cast(pl.Float64, strict=False) * 24.0,
                _text(frame, _col(frame, "years")).cast(pl.Float64, strict=False) * 8766.0,
            ]
        )
        last = parse_times(_text(frame, _col(frame, "last", "end", "last_seen")), None, "s")
        dbe, otb = _flag(frame, _col(frame, "dead_dbe")), _flag(frame, _col(frame, "dead_otb"))
        cause = pl.coalesce(
            [
                pl.when(dbe).then(pl.lit("DBE")),
                pl.when(otb).then(pl.lit("OTB")),
                _text(frame, _col(frame, "cause")),
            ]
        )
        parts = [_col(frame, c) for c in ("col", "row", "cage", "slot", "node")]
        if all(parts):
            c, r, g, s, n = (pl.col(p) for p in parts)  # type: ignore[arg-type]
            node = pl.concat_str(
                [pl.lit("c"), c, pl.lit("-"), r, pl.lit("c"), g, pl.lit("s"), s, pl.lit("n"), n]
            )
        else:
            node = _text(frame, _col(frame, "location", "node"))
        out = frame.select(
            "_line",
            pl.lit(dataset).alias("dataset"),
            unit.alias("unit"),
            node_expr(node).alias("node"),
            _text(frame, _col(frame, "batch", "model", "vendor_batch")).alias("batch"),
            (last - pl.duration(seconds=life_h * 3600.0)).alias("start"),
            last.alias("end"),
            life_h.alias("life_h"),
            _flag(frame, _col(frame, "dead", "failed", "died")).alias("failed"),
            cause.alias("cause"),
        )
        ok = pl.col("unit").is_not_null() & pl.col("life_h").is_not_null()
        bad = _bad(frame, out.select(ok).to_series(), "unit without a lifetime")
        good = out.filter(ok).rename({"_line": "line"}).with_columns(pl.lit(ctx.file).alias("file"))
        return {"lifetimes": good}, bad


PARSERS = [ResidencyParser(), LifetimeParser()]

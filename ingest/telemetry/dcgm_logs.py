"""DCGM tool output and daemon logs: ``dcgmi diag`` / ``dcgmi nvlink``, nv-hostengine and NVVS
logs, and the NVIDIA Fabric Manager log.

- ``dcgmi`` (whole document): the ``dcgmi diag`` result table (``| Denylist | Pass |``; one
  ``diag`` event per test result, severity from the result) and ``dcgmi nvlink --link-status``
  (per ``gpuId N:`` a row of link states U/D/X/_: telemetry ``NVLINK_LINKS_UP`` /
  ``NVLINK_LINKS_DOWN`` and an ``nvlink`` event for a GPU with links down). No timestamps: the file
  mtime, flagged ``file_mtime``.
- ``nv_hostengine``: ``2024-02-01 14:12:01.205 ERROR [9596:9598] message [src:line] [func]``
  (nv-hostengine.log and nvvs.log share it); ERROR/WARNING lines -> ``telemetry_error`` events,
  other levels noise. Its stamps, and fabric manager's, are the host's local time: UTC unless
  ``tz`` (a time ``tz`` has twice or never: ``ts`` NULL, ``ts_flag`` ``tz_ambiguous`` /
  ``tz_gap``).
- ``fabricmanager``: ``[Dec 19 2024 19:17:49] [ERROR] [tid 1374] message``; NVSwitch errors
  (``detected NVSwitch non-fatal error 12028 on fid 0 on NVSwitch pci bus id ... port 34``) ->
  ``sxid`` events with the code, other ERROR/WARNING lines -> ``telemetry_error`` events; INFO
  lines and the continuation lines of multi-line payloads are noise.
"""

from __future__ import annotations

import re
from typing import Any

import polars as pl

from faultlens.ingest.base import (
    ChunkResult,
    ParseContext,
    Parsed,
    Quarantined,
    numbered,
    pci_expr,
    quarantine_frame,
    rows_to_frames,
    to_json,
)
from faultlens.ingest.schema import Kind, Severity, Source, conform
from faultlens.ingest.telemetry.common import default_ts
from faultlens.ingest.zones import localize, zone_flag, zone_of


def _stamped(local: pl.Expr, ctx: ParseContext) -> list[pl.Expr]:
    """``ts`` (and, with ``tz``, ``ts_flag``) of a log's zone-less local stamps: UTC unless
    ``tz``; a time ``tz`` has twice or never is NULL, flagged ``tz_ambiguous`` / ``tz_gap``."""
    tz = zone_of(ctx)
    if not tz:
        return [local.alias("ts")]
    return [localize(local, tz).alias("ts"), zone_flag(local, tz).alias("ts_flag")]


# -- nv-hostengine / nvvs -------------------------------------------------------------------------

_HE_RE = (
    r"^([0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?) +"
    r"(ERROR|WARNING|WARN|INFO|DEBUG|VERBOSE|CRITICAL|FATAL) +\[([0-9]+):([0-9]+)\] +(.*)$"
)
_HE_SRC = r" \[([^\]\[ ]+:[0-9]+)\] \[([^\]]*)\]$"
_HE_SEV = {
    "ERROR": "error",
    "WARNING": "warning",
    "WARN": "warning",
    "CRITICAL": "critical",
    "FATAL": "critical",
}


class NvHostengineParser:
    name = "nv_hostengine"
    source = Source.DCGM
    whole_file = False

    def sniff(self, head_lines: list[str], path: str) -> float:
        lines = [ln for ln in head_lines if ln][:50]
        hits = sum(1 for ln in lines if re.match(_HE_RE, ln) and re.search(_HE_SRC, ln))
        return 0.9 if lines and hits >= max(1, len(lines) // 2) else 0.0

    def parse_line(self, line: str, ctx: ParseContext) -> Parsed | Quarantined | None:
        frame = numbered(pl.Series([line], dtype=pl.String), 1)
        return self._parse(frame, ctx).to_line_result()

    def new_state(self, ctx: ParseContext) -> Any:
        return None

    def parse_chunk(
        self, lines: pl.Series, first_line: int, ctx: ParseContext, state: Any
    ) -> ChunkResult:
        return self._parse(numbered(lines, first_line), ctx)

    def _parse(self, frame: pl.DataFrame, ctx: ParseContext) -> ChunkResult:
        g = (
            frame.filter(pl.col("raw").is_not_null())
            .with_columns(m=pl.col("raw").str.extract_groups(_HE_RE))
            .unnest("m")
        )
        g.columns = ["line", "raw", "stamp", "level", "pid", "tid", "msg"]
        loud = pl.col("raw").str.contains(r"\b(ERROR|WARNING|WARN|CRITICAL|FATAL)\b")
        bad = g.filter(pl.col("stamp").is_null() & loud)
        ev = g.filter(pl.col("level").is_in(list(_HE_SEV)))
        ev = ev.with_columns(src=pl.col("msg").str.extract_groups(_HE_SRC)).unnest("src")
        ev = ev.rename({"1": "src", "2": "func"})
        module = pl.col("msg").str.extract(r"^\[\[([^\]]+)\]\]")
        events = ev.select(
            *_stamped(pl.col("stamp").str.to_datetime("%Y-%m-%d %H:%M:%S%.f", strict=False), ctx),
            pl.lit(ctx.node).alias("node"),
            pl.lit(self.source.value).alias("source"),
            pl.lit(Kind.TELEMETRY_ERROR.value).alias("kind"),
            module.alias("subkind"),
            pl.col("level").replace_strict(_HE_SEV).alias("severity"),
            pl.col("pid").cast(pl.Int64),
            pl.lit("nv-hostengine").alias("process"),
            pl.col("msg").str.replace(_HE_SRC, "").str.slice(0, 2000).alias("message"),
            pl.struct("src", "func", "tid").struct.json_encode().alias("attrs"),
            pl.lit(ctx.file).alias("file"),
            "line",
        )
        quarantine = None
        if bad.height:
            quarantine = bad.select(
                "line",
                pl.col("raw").str.slice(0, 4000),
                pl.lit("looks like a DCGM log error but has no parsable stamp/level").alias(
                    "reason"
                ),
            )
        tables = {"events": conform("events", events)} if events.height else {}
        return ChunkResult(tables=tables, parsed=events.height, quarantine=quarantine)

    def finish(self, ctx: ParseContext, state: Any) -> ChunkResult:
        return ChunkResult()


# -- Fabric Manager -------------------------------------------------------------------------------

_FM_RE = (
    r"^\[([A-Z][a-z]{2} +[0-9]{1,2} [0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2})\] +"
    r"\[(ERROR|WARNING|WARN|INFO|DEBUG|FATAL|CRITICAL)\] +\[tid ([0-9]+)\] +(.*)$"
)
_SXID_RE = (
    r"detected NVSwitch (non-fatal|fatal) error ([0-9]+) on fid ([0-9]+) on NVSwitch pci bus id "
    r"([0-9A-Fa-f:.]+) physical id ([0-9]+) port ([0-9]+)"
)


class FabricManagerParser:
    name = "fabricmanager"
    source = Source.FABRICMANAGER
    whole_file = False

    def sniff(self, head_lines: list[str], path: str) -> float:
        lines = [ln for ln in head_lines if ln][:100]
        hits = sum(1 for ln in lines if re.match(_FM_RE, ln))
        return 0.9 if hits and hits >= len(lines) // 3 else 0.0

    def parse_line(self, line: str, ctx: ParseContext) -> Parsed | Quarantined | None:
        return self.parse_chunk(pl.Series([line], dtype=pl.String), 1, ctx, None).to_line_result()

    def new_state(self, ctx: ParseContext) -> Any:
        return None

    def parse_chunk(
        self, lines: pl.Series, first_line: int, ctx: ParseContext, state: Any
    ) -> ChunkResult:
        g = numbered(lines, first_line).filter(pl.col("raw").is_not_null())
        g = g.with_columns(m=pl.col("raw").str.extract_groups(_FM_RE)).unnest("m")
        g.columns = ["line", "raw", "stamp", "level", "tid", "msg"]
        loud = pl.col("raw").str.contains(r"\[(ERROR|WARNING|WARN|FATAL|CRITICAL)\]")
        bad = g.filter(pl.col("stamp").is_null() & loud)
        ev = g.filter(pl.col("level").is_in(["ERROR", "WARNING", "WARN", "FATAL", "CRITICAL"]))
        ev = ev.with_columns(sx=pl.col("msg").str.extract_groups(_SXID_RE)).unnest("sx")
        ev = ev.rename(
            {"1": "fatality", "2": "code", "3": "fid", "4": "switch", "5": "phys", "6": "port"}
        )
        is_sxid = pl.col("code").is_not_null()
        severity = (
            pl.when(pl.col("fatality") == "fatal")
            .then(pl.lit(Severity.CRITICAL.value))
            .when(is_sxid)
            .then(pl.lit(Severity.WARNING.value))
            .when(pl.col("level").is_in(["FATAL", "CRITICAL"]))
            .then(pl.lit("critical"))
            .when(pl.col("level") == "ERROR")
            .then(pl.lit("error"))
            .otherwise(pl.lit("warning"))
        )
        events = ev.select(
            *_stamped(
                pl.col("stamp")
                .str.replace_all("  ", " ")
                .str.to_datetime("%b %d %Y %H:%M:%S", strict=False),
                ctx,
            ),
            pl.lit(ctx.node).alias("node"),
            pl.lit(self.source.value).alias("source"),
            pl.when(is_sxid)
            .then(pl.lit(Kind.SXID.value))
            .otherwise(pl.lit(Kind.TELEMETRY_ERROR.value))
            .alias("kind"),
            pl.col("fatality").alias("subkind"),
            pl.col("code").cast(pl.Int32),
            severity.alias("severity"),
            pl.lit("nv-fabricmanager").alias("process"),
            pl.col("msg").str.slice(0, 2000).alias("message"),
            pl.struct(
                pci_expr(pl.col("switch")).alias("switch_pci"),
                pl.col("phys").cast(pl.Int32).alias("switch_physical_id"),
                pl.col("port").cast(pl.Int32),
                pl.col("fid").cast(pl.Int32),
                pl.col("tid").cast(pl.Int64),
            )
            .struct.json_encode()
            .alias("attrs"),
            pl.lit(ctx.file).alias("file"),
            "line",
        )
        quarantine = None
        if bad.height:
            quarantine = bad.select(
                "line",
                pl.col("raw").str.slice(0, 4000),
                pl.lit("fabric manager error line without a parsable stamp").alias("reason"),
            )
        tables = {"events": conform("events", events)} if events.height else {}
        return ChunkResult(tables=tables, parsed=events.height, quarantine=quarantine)

    def finish(self, ctx: ParseContext, state: Any) -> ChunkResult:
        return ChunkResult()


# -- dcgmi diag / nvlink --------------------------------------------------------------------------

_DIAG_ROW = re.compile(r"^\|\s*([^|]*?)\s*\|\s*([^|]*?)\s*\|$")
_DIAG_SECTION = re.compile(r"^\|-+\s+([A-Za-z][A-Za-z ]*?)\s+-+\+")
_GPUID = re.compile(r"^\s*gpuId ([0-9]+):\s*$")
_LINKS = re.compile(r"^\s*([UDX_](?: [UDX_])*)\s*$")
_DIAG_SEVERITY = {"pass": "info", "skip": "info", "warn": "warning", "fail": "error"}
_STRUCTURE = re.compile(
    r"^(\+[-=+]+\+|\|\s*(Diagnostic|NvLink Link Status)\s*\|.*|GPUs:|NvSwitches:|"
    r"\s*No NvSwitches found\.|Key: .*|Successfully ran diagnostic.*)\s*$"
)


def parse_dcgmi(
    numbered_lines: list[tuple[int, str]], ctx: ParseContext
) -> tuple[dict[str, list[dict[str, Any]]], int, list[tuple[int, str, str]]]:
    """``dcgmi diag`` / ``dcgmi nvlink`` text -> (rows per table, parsed lines, quarantined)."""
    ts, flag = default_ts(ctx)
    rows: dict[str, list[dict[str, Any]]] = {"events": [], "telemetry": []}
    quarantined: list[tuple[int, str, str]] = []
    parsed = 0
    section = None
    gpu: int | None = None
    base = {
        "ts": ts,
        "ts_flag": flag,
        "node": ctx.node,
        "source": Source.DCGM.value,
        "file": ctx.file,
    }
    for line_no, text in numbered_lines:
        if text is None or not text.strip() or _STRUCTURE.match(text):
            continue
        if m := _DIAG_SECTION.match(text):
            section = m[1]
            continue
        if m := _GPUID.match(text):
            gpu = int(m[1])
            parsed += 1
            continue
        if (m := _LINKS.match(text)) and gpu is not None:
            states = m[1].split()
            up, down = states.count("U"), states.count("D")
            for metric, value in (("NVLINK_LINKS_UP", up), ("NVLINK_LINKS_DOWN", down)):
                rows["telemetry"].append(
                    {
                        "ts": ts,
                        "node": ctx.node,
                        "gpu": gpu,
                        "metric": metric,
                        "value": float(value),
                    }
                )
            if down:
                rows["events"].append(
                    {
                        **base,
                        "gpu": str(gpu),
                        "gpu_index": gpu,
                        "kind": Kind.NVLINK.value,
                        "subkind": "link_down",
                        "severity": Severity.WARNING.value,
                        "message": f"{down} of {len(states)} NVLink links down (dcgmi nvlink)",
                        "attrs": to_json({"states": "".join(states)}),
                        "line": line_no,
                    }
                )
            parsed += 1
            continue
        if m := _DIAG_ROW.match(text):
            parsed += 1
            test, result = m[1], m[2]
            if section in (None, "Metadata"):
                continue
            verdict = result.split()[0].lower() if result.split() else ""
            rows["events"].append(
                {
                    **base,
                    "kind": Kind.DIAG.value,
                    "subkind": verdict or None,
                    "severity": _DIAG_SEVERITY.get(verdict, "warning"),
                    "message": f"{section}: {test}: {result}",
                    "attrs": to_json({"section": section, "test": test, "result": result}),
                    "line": line_no,
                }
            )
            continue
        if re.search(r"\b(Fail|Error|Warn)", text):
            quarantined.append((line_no, text, "unrecognized dcgmi output line"))
    return {k: v for k, v in rows.items() if v}, parsed, quarantined


class DcgmiParser:
    name = "dcgmi"
    source = Source.DCGM
    whole_file = True

    def sniff(self, head_lines: list[str], path: str) -> float:
        text = "\n".join(head_lines[:60])
        if "NvLink Link Status" in text or re.search(r"\|\s*Diagnostic\s*\|\s*Result\s*\|", text):
            return 0.95
        if "Successfully ran diagnostic" in text:
            return 0.9
        return 0.0

    def parse_line(self, line: str, ctx: ParseContext) -> Parsed | Quarantined | None:
        rows, parsed, quarantined = parse_dcgmi([(1, line)], ctx)
        if quarantined:
            return Quarantined(quarantined[0][2])
        return Parsed(rows) if rows else None

    def new_state(self, ctx: ParseContext) -> Any:
        return None

    def parse_chunk(
        self, lines: pl.Series, first_line: int, ctx: ParseContext, state: Any
    ) -> ChunkResult:
        items = list(enumerate(lines.to_list(), start=first_line))
        rows, parsed, quarantined = parse_dcgmi(items, ctx)
        quarantine = (
            quarantine_frame(*map(list, zip(*quarantined, strict=True))) if (quarantined) else None
        )
        return ChunkResult(tables=rows_to_frames(rows), parsed=parsed, quarantine=quarantine)

    def finish(self, ctx: ParseContext, state: Any) -> ChunkResult:
        return ChunkResult()


PARSERS = [DcgmiParser(), NvHostengineParser(), FabricManagerParser()]


# -- fabric manager in a node's journal / syslog ---------------------------------------------------

# A line fabric manager, or systemd about its service, wrote to the journal (``ingest.lines``
# routes them here): its own messages carry no level, so an error is one that says it failed.
FM_JOURNAL_LITERALS = ("nv-fabricmanager", "nvidia-fabricmanager", "NVIDIA fabric manager")
FM_JOURNAL_ANCHOR = (
    r"\bnv-fabricmanager(?:\[[0-9]+\])?: |\bnvidia-fabricmanager\.service\b"
    r"|\b(?:Starting|Started|Stopping|Stopped|Failed to start) NVIDIA fabric manager"
)
# systemd: the service failed (a non-zero status, a signal, a core dump, a failed result / start)
_FM_SERVICE_FAILED = (
    r"nvidia-fabricmanager\.service: (?:(?:Main|Control) process exited, code=(?:killed|dumped"
    r"|exited, status=[1-9][0-9]*)|Failed with result)|Failed to start NVIDIA fabric manager"
)
_FM_OWN = r"\bnv-fabricmanager(?:\[[0-9]+\])?: "
_FM_FAILED = r"(?i)\b(?:fail(?:ed|ure|s)?|error|abort(?:ed|ing)?|fatal)\b"


def journal_rows(cand: pl.DataFrame, ctx: ParseContext) -> ChunkResult:
    """Fabric manager's journal lines (``line``, ``raw``: the whole line, ``body``: its message
    after any syslog prefix) -> events: an NVSwitch error -> ``sxid`` (as in its own log), its
    service failing (systemd) -> ``telemetry_error`` ``service_failed``, a message of its own
    that says it failed -> ``telemetry_error`` ``fabricmanager``; its other lines are noise."""
    empty = ChunkResult(parsed_lines=pl.Series("line", [], dtype=pl.Int64))
    if cand.height == 0:
        return empty
    raw, body = pl.col("raw"), pl.col("body")
    f = cand.with_columns(sx=body.str.extract_groups(_SXID_RE)).unnest("sx")
    f = f.rename(
        {"1": "fatality", "2": "code", "3": "fid", "4": "switch", "5": "phys", "6": "port"}
    )
    is_sxid = pl.col("code").is_not_null()
    service = raw.str.contains(_FM_SERVICE_FAILED)
    own = raw.str.contains(_FM_OWN) & body.str.contains(_FM_FAILED)
    f = f.with_columns(
        _what=pl.when(is_sxid)
        .then(pl.lit("sxid"))
        .when(service)
        .then(pl.lit("service_failed"))
        .when(own)
        .then(pl.lit("fabricmanager"))
    ).filter(pl.col("_what").is_not_null())
    if f.height == 0:
        return empty
    sxid = pl.col("_what") == "sxid"
    events = f.select(
        pl.lit(None, pl.Datetime("us")).alias("ts"),
        pl.lit("no_ts").alias("ts_flag"),
        pl.lit(ctx.node, pl.String).alias("node"),
        pl.lit(Source.FABRICMANAGER.value).alias("source"),
        pl.when(sxid)
        .then(pl.lit(Kind.SXID.value))
        .otherwise(pl.lit(Kind.TELEMETRY_ERROR.value))
        .alias("kind"),
        pl.when(sxid).then(pl.col("fatality")).otherwise(pl.col("_what")).alias("subkind"),
        pl.col("code").cast(pl.Int32),
        pl.when(pl.col("fatality") == "fatal")
        .then(pl.lit(Severity.CRITICAL.value))
        .when(sxid)
        .then(pl.lit(Severity.WARNING.value))
        .otherwise(pl.lit(Severity.ERROR.value))
        .alias("severity"),
        pl.lit("nv-fabricmanager").alias("process"),
        body.str.strip_chars().str.slice(0, 2000).alias("message"),
        pl.when(sxid)
        .then(
            pl.struct(
                pci_expr(pl.col("switch")).alias("switch_pci"),
                pl.col("phys").cast(pl.Int32).alias("switch_physical_id"),
                pl.col("port").cast(pl.Int32),
                pl.col("fid").cast(pl.Int32),
            ).struct.json_encode()
        )
        .alias("attrs"),
        pl.lit(ctx.file).alias("file"),
        "line",
    )
    events = conform("events", events)
    return ChunkResult(
        tables={"events": events}, parsed=events.height, parsed_lines=events.get_column("line")
    )

"""nvidia-smi's other outputs: ``--query-gpu=... --format=csv`` series, the default table,
``nvidia-smi nvlink -s`` / ``-L``, and capture bundles that hold many of them.

- ``nvidia_smi_csv`` (vectorized, streams): a header line (``timestamp, index, temperature.gpu,
  power.draw [W], ...``) then one row per GPU per sample, as ``nvidia-smi --query-gpu=...
  --format=csv -l 5`` writes it. Fields map to DCGM names (``temperature.gpu`` ->
  ``DCGM_FI_DEV_GPU_TEMP``, ``power.draw`` -> ``DCGM_FI_DEV_POWER_USAGE``, ``clocks.sm`` ->
  ``DCGM_FI_DEV_SM_CLOCK``, ...); identity fields (``uuid``, ``pci.bus_id``, ``name``, ``serial``)
  feed the inventory. A row with the wrong number of fields, or before any header, is quarantined.
  The ``timestamp`` is the node's local time (UTC unless ``tz``); one ``tz`` has twice or never
  leaves the row's ``ts`` NULL (telemetry has no flag column; dmon's untimed samples are kept so).
- ``nvidia_smi_table`` (document): the ``+----+`` boxed table; per GPU its index, name, bus id,
  temperature, P-state, power draw / cap, memory used / total, utilization, volatile ECC.
- ``nvidia_smi_nvlink`` (document): ``GPU 7: NAME (UUID: GPU-...)`` lines (``-L``) and, under
  each, ``Link N: 25 GB/s`` or ``<inactive>`` (``nvlink -s``): inventory, link counts, and an
  ``nvlink`` event for inactive links.
- ``nvidia_smi_bundle`` (document): sections opened by a ``#####`` banner naming the command
  (``# $ nvidia-smi -q``); each section goes to the parser of its command (``nvidia-smi dmon``
  to ``telemetry.dmon``'s: no ``-o DT``, so its samples keep ``ts`` NULL), the rest is noise.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import polars as pl

from faultlens.ingest.base import (
    ChunkResult,
    ParseContext,
    Parsed,
    Quarantined,
    fmt,
    node_expr,
    pci_expr,
    quarantine_frame,
    to_json,
)
from faultlens.ingest.schema import TS, Kind, Severity, Source, conform
from faultlens.ingest.telemetry.common import default_ts
from faultlens.ingest.telemetry.dmon import NvidiaSmiDmonParser
from faultlens.ingest.telemetry.nvsmi import (
    THROTTLE_METRIC,
    D,
    DocParser,
    GpuDoc,
    docs_to_result,
    parse_q_text,
    parse_q_xml,
)
from faultlens.ingest.telemetry.nvsmi import value_expr as nvsmi_value
from faultlens.ingest.zones import localize, zone_flag, zone_of

log = logging.getLogger(__name__)

CSV_METRICS = {
    "temperature.gpu": D + "GPU_TEMP",
    "temperature.memory": D + "MEMORY_TEMP",
    "power.draw": D + "POWER_USAGE",
    "power.draw.instant": D + "POWER_USAGE_INSTANT",
    "power.limit": D + "POWER_MGMT_LIMIT",
    "enforced.power.limit": D + "ENFORCED_POWER_LIMIT",
    "clocks.sm": D + "SM_CLOCK",
    "clocks.current.sm": D + "SM_CLOCK",
    "clocks.mem": D + "MEM_CLOCK",
    "clocks.current.memory": D + "MEM_CLOCK",
    "clocks.video": D + "VIDEO_CLOCK",
    "clocks.current.video": D + "VIDEO_CLOCK",
    "clocks.gr": "NVSMI_CLOCKS_GRAPHICS_MHZ",
    "clocks.current.graphics": "NVSMI_CLOCKS_GRAPHICS_MHZ",
    "clocks.max.sm": D + "MAX_SM_CLOCK",
    "clocks.max.memory": D + "MAX_MEM_CLOCK",
    "clocks.applications.graphics": D + "APP_SM_CLOCK",
    "clocks.applications.memory": D + "APP_MEM_CLOCK",
    "utilization.gpu": D + "GPU_UTIL",
    "utilization.memory": D + "MEM_COPY_UTIL",
    "utilization.encoder": D + "ENC_UTIL",
    "utilization.decoder": D + "DEC_UTIL",
    "memory.total": D + "FB_TOTAL",
    "memory.used": D + "FB_USED",
    "memory.free": D + "FB_FREE",
    "memory.reserved": D + "FB_RESERVED",
    "fan.speed": D + "FAN_SPEED",
    "pstate": D + "PSTATE",
    "pcie.link.gen.current": D + "PCIE_LINK_GEN",
    "pcie.link.width.current": D + "PCIE_LINK_WIDTH",
    "ecc.errors.corrected.volatile.total": D + "ECC_SBE_VOL_TOTAL",
    "ecc.errors.uncorrected.volatile.total": D + "ECC_DBE_VOL_TOTAL",
    "ecc.errors.corrected.aggregate.total": D + "ECC_SBE_AGG_TOTAL",
    "ecc.errors.uncorrected.aggregate.total": D + "ECC_DBE_AGG_TOTAL",
    "retired_pages.single_bit_ecc.count": D + "RETIRED_SBE",
    "retired_pages.sbe": D + "RETIRED_SBE",
    "retired_pages.double_bit.count": D + "RETIRED_DBE",
    "retired_pages.dbe": D + "RETIRED_DBE",
    "retired_pages.pending": D + "RETIRED_PENDING",
    "remapped_rows.correctable": D + "CORRECTABLE_REMAPPED_ROWS",
    "remapped_rows.uncorrectable": D + "UNCORRECTABLE_REMAPPED_ROWS",
    "remapped_rows.pending": D + "ROW_REMAP_PENDING",
    "remapped_rows.failure": D + "ROW_REMAP_FAILURE",
    "clocks_event_reasons.active": THROTTLE_METRIC,
    "clocks_throttle_reasons.active": THROTTLE_METRIC,
}
for _level in ("max", "high", "partial", "low", "none"):
    CSV_METRICS[f"remapped_rows.histogram.{_level}"] = f"{D}BANKS_REMAP_ROWS_AVAIL_{_level.upper()}"
CSV_IDENTITY = {
    "uuid": "uuid",
    "gpu_uuid": "uuid",
    "name": "model",
    "gpu_name": "model",
    "serial": "serial",
    "gpu_serial": "serial",
    "pci.bus_id": "pci",
    "gpu_bus_id": "pci",
    "vbios_version": "vbios_version",
    "driver_version": "driver_version",
}
_FIELD = r"[a-z_][a-zA-Z0-9_.]*(?: \[[^\]]*\])?"
CSV_HEADER_RE = rf"^{_FIELD}(?:, ?{_FIELD})*\s*$"


def _field_name(header_field: str) -> str:
    return re.sub(r"\s*\[.*\]$", "", header_field.strip()).lower()


# -- --query-gpu csv ------------------------------------------------------------------------------


class NvidiaSmiCsvParser:
    name = "nvidia_smi_csv"
    source = Source.NVIDIA_SMI
    whole_file = False

    def sniff(self, head_lines: list[str], path: str) -> float:
        for ln in head_lines[:5]:
            if ln and re.match(CSV_HEADER_RE, ln):
                fields = {_field_name(f) for f in ln.split(",")}
                if len(fields & (set(CSV_METRICS) | set(CSV_IDENTITY) | {"index"})) >= 2:
                    return 0.9
        return 0.0

    def parse_line(self, line: str, ctx: ParseContext) -> Parsed | Quarantined | None:
        state = self.new_state(ctx)
        if ctx.columns:
            state["header"] = [_field_name(c) for c in ctx.columns]
        r = self.parse_chunk(pl.Series([line], dtype=pl.String), 1, ctx, state)
        if r.quarantined:
            return Quarantined(r.quarantine["reason"][0])
        rows = {k: v.to_dicts() for k, v in r.tables.items() if v.height}
        return Parsed(rows) if rows else None

    def new_state(self, ctx: ParseContext) -> Any:
        return {"header": [_field_name(c) for c in ctx.columns] if ctx.columns else None}

    def parse_chunk(
        self, lines: pl.Series, first_line: int, ctx: ParseContext, state: Any
    ) -> ChunkResult:
        frame = pl.DataFrame(
            {
                "line": pl.int_range(
                    first_line, first_line + lines.len(), eager=True, dtype=pl.Int64
                ),
                "raw": lines.rename("raw"),
            }
        ).filter(pl.col("raw").is_not_null() & (pl.col("raw").str.strip_chars() != ""))
        frame = frame.with_columns(is_header=pl.col("raw").str.contains(CSV_HEADER_RE))
        frame = frame.with_columns(group=pl.col("is_header").cum_sum())
        result = ChunkResult()
        for _group, part in frame.group_by("group", maintain_order=True):
            if part["is_header"][0]:
                state["header"] = [_field_name(f) for f in part["raw"][0].split(",")]
                result = result.merge(ChunkResult(parsed=1))
                part = part.slice(1)
            if part.height:
                result = result.merge(csv_rows(part, state["header"], ctx, self.source))
        return result

    def finish(self, ctx: ParseContext, state: Any) -> ChunkResult:
        return ChunkResult()


def csv_rows(
    part: pl.DataFrame, header: list[str] | None, ctx: ParseContext, source: Source
) -> ChunkResult:
    """Data rows (columns line, raw) under ``header`` -> telemetry / gpus."""
    if header is None:
        return ChunkResult(
            quarantine=part.select(
                "line", "raw", pl.lit("nvidia-smi csv row before any header line").alias("reason")
            )
        )
    n = len(header)
    split = part.with_columns(f=pl.col("raw").str.split(","))
    good = split.filter(pl.col("f").list.len() == n)
    bad = split.filter(pl.col("f").list.len() != n).select(
        "line",
        "raw",
        fmt(
            "expected {} comma-separated fields, found {}", pl.lit(n), pl.col("f").list.len()
        ).alias("reason"),
    )
    col = {name: pl.col("f").list.get(i).str.strip_chars() for i, name in enumerate(header)}
    na = ("N/A", "[N/A]", "")

    def field(name: str) -> pl.Expr:
        if name not in col:
            return pl.lit(None, pl.String)
        return pl.when(~col[name].is_in(na)).then(col[name])

    ts0, _flag = default_ts(ctx)
    stamp = field("timestamp").str.to_datetime("%Y/%m/%d %H:%M:%S%.f", strict=False)
    ts = pl.coalesce(stamp, pl.lit(ts0, TS))
    if tz := zone_of(ctx):  # a stamp the zone has twice / never: null, not the file's time
        ts = pl.when(stamp.is_not_null()).then(localize(stamp, tz)).otherwise(pl.lit(ts0, TS))
        unplaced = good.select(zone_flag(stamp, tz).is_not_null().sum()).item()
        if unplaced:
            log.warning(
                "%s: %d nvidia-smi rows at a time %s has twice or never (the hour its clocks"
                " change) kept without a time",
                ctx.file,
                unplaced,
                tz,
            )
    base = good.select(
        "line",
        ts.alias("ts"),
        node_expr(pl.coalesce(field("hostname"), pl.lit(ctx.node, pl.String))).alias("node"),
        field("index").cast(pl.Int32, strict=False).alias("idx"),
        *[field(k).alias(v) for k, v in CSV_IDENTITY.items() if k in col],
        *[field(k).alias(f"m{i}") for i, k in enumerate(header) if k in CSV_METRICS],
    )
    if "idx" in base.columns and base["idx"].null_count() == base.height:
        base = base.with_columns(idx=pl.int_range(pl.len()).over("ts").cast(pl.Int32))
    metric_cols = {f"m{i}": CSV_METRICS[k] for i, k in enumerate(header) if k in CSV_METRICS}
    long = (
        base.unpivot(
            on=list(metric_cols), index=["ts", "node", "idx"], variable_name="m", value_name="raw"
        )
        if metric_cols
        else pl.DataFrame()
    )
    tables: dict[str, pl.DataFrame] = {}
    if long.height:
        tel = long.select(
            "ts",
            "node",
            pl.col("idx").alias("gpu"),
            pl.col("m").replace_strict(metric_cols).alias("metric"),
            nvsmi_value(pl.col("raw")).alias("value"),
        )
        tables["telemetry"] = conform("telemetry", tel.filter(pl.col("value").is_not_null()))
    ident = [
        c
        for c in ("uuid", "model", "serial", "pci", "vbios_version", "driver_version")
        if c in base.columns
    ]
    if ident:
        gpus = base.group_by("node", "idx", *ident).agg(
            first_seen=pl.col("ts").min(), last_seen=pl.col("ts").max()
        )
        gpus = gpus.with_columns(
            gpu_index=pl.col("idx"),
            pci_bus_id=pci_expr(pl.col("pci")) if "pci" in ident else pl.lit(None, pl.String),
            source=pl.lit(source.value),
            file=pl.lit(ctx.file),
        ).drop("idx", *(["pci"] if "pci" in ident else []))
        tables["gpus"] = conform("gpus", gpus)
    quarantine = bad.select("line", "raw", "reason") if bad.height else None
    return ChunkResult(tables=tables, parsed=good.height, quarantine=quarantine)


# -- documents: table, nvlink / -L, bundle --------------------------------------------------------

_T_ROW1 = re.compile(
    r"^\|\s+([0-9]+)\s+(.+?)\s+(On|Off)\s+\|\s+([0-9A-Fa-f]+:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])"
    r"\s+(On|Off)\s+\|\s*(\S+)\s*\|\s*$"
)
_T_ROW2 = re.compile(
    r"^\|\s*(\S+)\s+(\S+)\s+(P[0-9]+|\S+)\s+(\S+)\s*/\s*(\S+)\s+\|\s*(\S+)\s*/\s*(\S+)\s*\|"
    r"\s*(\S+)\s+(\S.*?)\s*\|\s*$"
)
_T_DRIVER = re.compile(r"Driver Version:\s*(\S+)")
_T_TS = re.compile(r"^([A-Z][a-z]{2} [A-Z][a-z]{2} +[0-9]{1,2} [0-9:]{8} [0-9]{4})\s*$")


def parse_table(lines: list[tuple[int, str | None]], ctx: ParseContext) -> ChunkResult:
    header: dict[str, str] = {}
    docs: list[GpuDoc] = []
    cur: GpuDoc | None = None
    for line_no, text in lines:
        if text is None:
            continue
        if m := _T_TS.match(text):
            header["timestamp"] = re.sub(" +", " ", m[1])
        elif m := _T_DRIVER.search(text):
            header["driver_version"] = m[1]
        elif m := _T_ROW1.match(text):
            cur = GpuDoc(index=int(m[1]), pci=m[4], ident={"model": m[2]})
            cur.values.append((line_no, D + "ECC_DBE_VOL_TOTAL", m[6]))
            docs.append(cur)
        elif (m := _T_ROW2.match(text)) and cur is not None and not cur.values[1:]:
            for i, metric in (
                (1, D + "FAN_SPEED"),
                (2, D + "GPU_TEMP"),
                (3, D + "PSTATE"),
                (4, D + "POWER_USAGE"),
                (5, D + "POWER_MGMT_LIMIT"),
                (6, D + "FB_USED"),
                (7, D + "FB_TOTAL"),
                (8, D + "GPU_UTIL"),
            ):
                cur.values.append((line_no, metric, m[i]))
    return docs_to_result(docs, header, ctx, Source.NVIDIA_SMI, lines, "nvidia-smi table")


_L_GPU = re.compile(r"^GPU ([0-9]+): (.+?) \(UUID: (GPU-[0-9a-fA-F-]+)\)\s*$")
_L_LINK = re.compile(r"^\s+Link ([0-9]+): (?:([0-9.]+) GB/s|<?(inactive)>?)\s*$", re.I)


def parse_nvlink(lines: list[tuple[int, str | None]], ctx: ParseContext) -> ChunkResult:
    """``nvidia-smi -L`` and ``nvidia-smi nvlink -s``."""
    ts, flag = default_ts(ctx)
    gpus: dict[int, dict[str, Any]] = {}
    links: dict[int, list[tuple[int, float | None]]] = {}
    parsed = 0
    quarantined = []
    for line_no, text in lines:
        if text is None or not text.strip():
            continue
        if m := _L_GPU.match(text):
            idx = int(m[1])
            gpus[idx] = {
                "node": ctx.node,
                "gpu_index": idx,
                "model": m[2],
                "uuid": m[3],
                "first_seen": ts,
                "last_seen": ts,
                "source": "nvidia_smi",
                "file": ctx.file,
                "_line": line_no,
            }
            links.setdefault(idx, [])
            parsed += 1
        elif (m := _L_LINK.match(text)) and gpus:
            links[max(gpus, key=lambda k: gpus[k]["_line"])].append(
                (line_no, None if m[3] else float(m[2]))
            )
            parsed += 1
        else:
            quarantined.append((line_no, text, "unrecognized nvidia-smi -L / nvlink -s line"))
    tel, events = [], []
    for idx, items in links.items():
        if not items:
            continue
        up = [v for _, v in items if v is not None]
        down = [n for n, v in items if v is None]
        for metric, value in (
            ("NVLINK_LINKS_UP", len(up)),
            ("NVLINK_LINKS_DOWN", len(down)),
            ("NVSMI_NVLINK_SPEED_GBPS_MIN", min(up) if up else None),
        ):
            if value is not None:
                tel.append(
                    {
                        "ts": ts,
                        "node": ctx.node,
                        "gpu": idx,
                        "metric": metric,
                        "value": float(value),
                    }
                )
        if down:
            events.append(
                {
                    "ts": ts,
                    "ts_flag": flag,
                    "node": ctx.node,
                    "gpu": str(idx),
                    "gpu_index": idx,
                    "source": "nvidia_smi",
                    "kind": Kind.NVLINK.value,
                    "subkind": "link_inactive",
                    "severity": Severity.WARNING.value,
                    "message": f"{len(down)} of {len(items)} NVLink links inactive",
                    "attrs": to_json({"uuid": gpus[idx]["uuid"]}),
                    "file": ctx.file,
                    "line": down[0],
                }
            )
    tables = {}
    if gpus:
        tables["gpus"] = conform(
            "gpus",
            pl.DataFrame([{k: v for k, v in g.items() if k != "_line"} for g in gpus.values()]),
        )
    if tel:
        tables["telemetry"] = conform("telemetry", pl.DataFrame(tel))
    if events:
        tables["events"] = conform("events", pl.DataFrame(events))
    q = quarantine_frame(*map(list, zip(*quarantined, strict=True))) if quarantined else None
    return ChunkResult(tables=tables, parsed=parsed, quarantine=q)


_BANNER = re.compile(r"^#{20,}\s*$")
_CMD = re.compile(r"^# \$ (.*)$")


def parse_bundle(lines: list[tuple[int, str | None]], ctx: ParseContext) -> ChunkResult:
    """A capture bundle: banner-delimited sections, each parsed by its command's parser."""
    sections: list[tuple[str | None, list[tuple[int, str | None]]]] = []
    body: list[tuple[int, str | None]] = []
    cmd: str | None = None
    in_banner = False
    for line_no, text in lines:
        if text is not None and _BANNER.match(text):
            if not in_banner:
                sections.append((cmd, body))
                body, cmd = [], None
            in_banner = not in_banner
            continue
        if in_banner:
            if text and (m := _CMD.match(text)):
                cmd = m[1].strip()
            continue
        body.append((line_no, text))
    sections.append((cmd, body))
    result = ChunkResult()
    for cmd, part in sections:
        sub = _section_parser(cmd)
        if sub is not None and any(t for _, t in part):
            result = result.merge(sub(part, ctx))
    return result


def _section_parser(cmd: str | None) -> Any:
    if not cmd or not cmd.startswith("nvidia-smi"):
        return None
    args = cmd.split()[1:]
    if "-q" in args:
        return parse_q_xml if "-x" in args else parse_q_text
    if any(a.startswith("--query-gpu=") for a in args):

        def csv(part: list[tuple[int, str | None]], ctx: ParseContext) -> ChunkResult:
            p = NvidiaSmiCsvParser()
            return p.parse_chunk(
                pl.Series([t for _, t in part], dtype=pl.String), part[0][0], ctx, p.new_state(ctx)
            )

        return csv
    if args in (["nvlink", "-s"], ["-L"]):
        return parse_nvlink
    if args[:1] == ["dmon"]:

        def dmon(part: list[tuple[int, str | None]], ctx: ParseContext) -> ChunkResult:
            p = NvidiaSmiDmonParser()
            return p.parse_chunk(
                pl.Series([t for _, t in part], dtype=pl.String), part[0][0], ctx, p.new_state(ctx)
            )

        return dmon
    if not args:
        return parse_table
    return None


class NvidiaSmiTableParser(DocParser):
    name = "nvidia_smi_table"
    _parse = staticmethod(parse_table)

    def sniff(self, head_lines: list[str], path: str) -> float:
        text = "\n".join(head_lines[:12])
        return 0.9 if re.search(r"^\| NVIDIA-SMI [0-9.]+ ", text, re.M) else 0.0


class NvidiaSmiNvlinkParser(DocParser):
    name = "nvidia_smi_nvlink"
    _parse = staticmethod(parse_nvlink)

    def sniff(self, head_lines: list[str], path: str) -> float:
        lines = [ln for ln in head_lines[:60] if ln and ln.strip()]
        hits = sum(1 for ln in lines if _L_GPU.match(ln) or _L_LINK.match(ln))
        return 0.85 if lines and _L_GPU.match(lines[0]) and hits == len(lines) else 0.0


class NvidiaSmiBundleParser(DocParser):
    name = "nvidia_smi_bundle"
    _parse = staticmethod(parse_bundle)

    def sniff(self, head_lines: list[str], path: str) -> float:
        head = head_lines[:6]
        ok = (
            len(head) >= 3
            and _BANNER.match(head[0] or "")
            and any((ln or "").startswith("# $ nvidia-smi") for ln in head)
        )
        return 0.95 if ok else 0.0


PARSERS = [
    NvidiaSmiCsvParser(),
    NvidiaSmiTableParser(),
    NvidiaSmiNvlinkParser(),
    NvidiaSmiBundleParser(),
]

"""``nvidia-smi -q`` (text) and ``nvidia-smi -q -x`` (XML) -> telemetry, gpus, events.

Both are trees: the text form by indentation (``GPU 00000000:19:00.0`` opens a GPU, a line without
`` : `` opens a section, ``Key : value`` is a leaf), the XML form one element per line. Each leaf
path is mapped to its DCGM field name where DCGM has one (``Temperature/GPU Current Temp`` ->
``DCGM_FI_DEV_GPU_TEMP``, ``Remapped Rows/Uncorrectable Error`` ->
``DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS``, the active clock event / throttle reasons -> the
``DCGM_FI_DEV_CLOCK_THROTTLE_REASONS`` bitmask, ...) and otherwise to a clear ``NVSMI_*`` name
(Hopper's split SRAM/DRAM ECC counters, for example, which are also summed into DCGM's
volatile/aggregate SBE/DBE totals). Identity leaves (product name, serial, UUID, bus id, VBIOS,
driver) become the ``gpus`` inventory; the GPU index is the GPU's position in the document,
which is nvidia-smi's own (PCI order) numbering.

Both are read line by line with a path stack, so excerpts that start or end mid-document (a pasted
fragment, a half-written capture) still give what they contain. Accounting is per document: all
of its lines are parsed when it yields anything, otherwise all are quarantined with the reason.
Stamps: the document's ``Timestamp`` (host local time: UTC unless ``tz``; a time ``tz`` has twice
or never is left null, its events flagged ``tz_ambiguous`` / ``tz_gap``), else the scrape time /
mtime.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import polars as pl

from faultlens.ingest.base import (
    ChunkResult,
    ParseContext,
    Parsed,
    Quarantined,
    fmt,
    normalize_pci,
    quarantine_frame,
    to_json,
)
from faultlens.ingest.schema import TS, Kind, Severity, Source, conform
from faultlens.ingest.telemetry.common import default_ts
from faultlens.ingest.zones import to_utc, zone_of

D = "DCGM_FI_DEV_"
# Text-format leaf paths (lower case, sections joined by "/") -> metric.
Q_METRICS = {
    "temperature/gpu current temp": D + "GPU_TEMP",
    "temperature/memory current temp": D + "MEMORY_TEMP",
    "gpu power readings/power draw": D + "POWER_USAGE",
    "power readings/power draw": D + "POWER_USAGE",
    "gpu power readings/current power limit": D + "POWER_MGMT_LIMIT",
    "power readings/power limit": D + "POWER_MGMT_LIMIT",
    "gpu power readings/enforced power limit": D + "ENFORCED_POWER_LIMIT",
    "power readings/enforced power limit": D + "ENFORCED_POWER_LIMIT",
    "clocks/sm": D + "SM_CLOCK",
    "clocks/memory": D + "MEM_CLOCK",
    "clocks/video": D + "VIDEO_CLOCK",
    "clocks/graphics": "NVSMI_CLOCKS_GRAPHICS_MHZ",
    "max clocks/sm": D + "MAX_SM_CLOCK",
    "max clocks/memory": D + "MAX_MEM_CLOCK",
    "max clocks/video": D + "MAX_VIDEO_CLOCK",
    "applications clocks/graphics": D + "APP_SM_CLOCK",
    "applications clocks/memory": D + "APP_MEM_CLOCK",
    "utilization/gpu": D + "GPU_UTIL",
    "utilization/memory": D + "MEM_COPY_UTIL",
    "utilization/encoder": D + "ENC_UTIL",
    "utilization/decoder": D + "DEC_UTIL",
    "fb memory usage/total": D + "FB_TOTAL",
    "fb memory usage/used": D + "FB_USED",
    "fb memory usage/free": D + "FB_FREE",
    "fb memory usage/reserved": D + "FB_RESERVED",
    "fan speed": D + "FAN_SPEED",
    "performance state": D + "PSTATE",
    "pci/replays since reset": D + "PCIE_REPLAY_COUNTER",
    "pci/tx throughput": D + "PCIE_TX_THROUGHPUT",
    "pci/rx throughput": D + "PCIE_RX_THROUGHPUT",
    "pci/gpu link info/pcie generation/current": D + "PCIE_LINK_GEN",
    "pci/gpu link info/link width/current": D + "PCIE_LINK_WIDTH",
    "retired pages/single bit ecc": D + "RETIRED_SBE",
    "retired pages/double bit ecc": D + "RETIRED_DBE",
    "retired pages/pending page blacklist": D + "RETIRED_PENDING",
    "retired pages/pending page retirement": D + "RETIRED_PENDING",
    "remapped rows/correctable error": D + "CORRECTABLE_REMAPPED_ROWS",
    "remapped rows/uncorrectable error": D + "UNCORRECTABLE_REMAPPED_ROWS",
    "remapped rows/pending": D + "ROW_REMAP_PENDING",
    "remapped rows/remapping failure occurred": D + "ROW_REMAP_FAILURE",
    "ecc errors/volatile/single bit/total": D + "ECC_SBE_VOL_TOTAL",
    "ecc errors/volatile/double bit/total": D + "ECC_DBE_VOL_TOTAL",
    "ecc errors/aggregate/single bit/total": D + "ECC_SBE_AGG_TOTAL",
    "ecc errors/aggregate/double bit/total": D + "ECC_DBE_AGG_TOTAL",
    "gpu reset status/reset required": "NVSMI_RESET_REQUIRED",
    "gpu reset status/drain and reset recommended": "NVSMI_DRAIN_AND_RESET_RECOMMENDED",
    "voltage/graphics": "NVSMI_VOLTAGE_GRAPHICS_MV",
}
for _level in ("max", "high", "partial", "low", "none"):
    Q_METRICS[f"remapped rows/bank remap availability histogram/{_level}"] = (
        f"{D}BANKS_REMAP_ROWS_AVAIL_{_level.upper()}"
    )

# XML leaf paths (last one, two or three elements) -> metric.
X_METRICS = {
    "temperature/gpu_temp": D + "GPU_TEMP",
    "temperature/memory_temp": D + "MEMORY_TEMP",
    "gpu_power_readings/power_draw": D + "POWER_USAGE",
    "power_readings/power_draw": D + "POWER_USAGE",
    "gpu_power_readings/current_power_limit": D + "POWER_MGMT_LIMIT",
    "power_readings/power_limit": D + "POWER_MGMT_LIMIT",
    "clocks/sm_clock": D + "SM_CLOCK",
    "clocks/mem_clock": D + "MEM_CLOCK",
    "clocks/video_clock": D + "VIDEO_CLOCK",
    "clocks/graphics_clock": "NVSMI_CLOCKS_GRAPHICS_MHZ",
    "max_clocks/sm_clock": D + "MAX_SM_CLOCK",
    "max_clocks/mem_clock": D + "MAX_MEM_CLOCK",
    "utilization/gpu_util": D + "GPU_UTIL",
    "utilization/memory_util": D + "MEM_COPY_UTIL",
    "utilization/encoder_util": D + "ENC_UTIL",
    "utilization/decoder_util": D + "DEC_UTIL",
    "fb_memory_usage/total": D + "FB_TOTAL",
    "fb_memory_usage/used": D + "FB_USED",
    "fb_memory_usage/free": D + "FB_FREE",
    "fb_memory_usage/reserved": D + "FB_RESERVED",
    "fan_speed": D + "FAN_SPEED",
    "performance_state": D + "PSTATE",
    "replay_counter": D + "PCIE_REPLAY_COUNTER",
    "tx_util": D + "PCIE_TX_THROUGHPUT",
    "rx_util": D + "PCIE_RX_THROUGHPUT",
    "multiple_single_bit_retirement/retired_count": D + "RETIRED_SBE",
    "double_bit_retirement/retired_count": D + "RETIRED_DBE",
    "retired_pages/pending_blacklist": D + "RETIRED_PENDING",
    "retired_pages/pending_retirement": D + "RETIRED_PENDING",
    "remapped_rows/remapped_row_corr": D + "CORRECTABLE_REMAPPED_ROWS",
    "remapped_rows/remapped_row_unc": D + "UNCORRECTABLE_REMAPPED_ROWS",
    "remapped_rows/remapped_row_pending": D + "ROW_REMAP_PENDING",
    "remapped_rows/remapped_row_failure": D + "ROW_REMAP_FAILURE",
    "volatile/single_bit/total": D + "ECC_SBE_VOL_TOTAL",
    "volatile/double_bit/total": D + "ECC_DBE_VOL_TOTAL",
    "aggregate/single_bit/total": D + "ECC_SBE_AGG_TOTAL",
    "aggregate/double_bit/total": D + "ECC_DBE_AGG_TOTAL",
    "gpu_reset_status/reset_required": "NVSMI_RESET_REQUIRED",
    "gpu_reset_status/drain_and_reset_recommended": "NVSMI_DRAIN_AND_RESET_RECOMMENDED",
}

# Clock event ("throttle") reasons -> DCGM / NVML bit.
THROTTLE_BITS = {
    "idle": 0x1,
    "gpu_idle": 0x1,
    "applications clocks setting": 0x2,
    "applications_clocks_setting": 0x2,
    "sw power cap": 0x4,
    "sw_power_cap": 0x4,
    "hw slowdown": 0x8,
    "hw_slowdown": 0x8,
    "sync boost": 0x10,
    "sync_boost": 0x10,
    "sw thermal slowdown": 0x20,
    "sw_thermal_slowdown": 0x20,
    "hw thermal slowdown": 0x40,
    "hw_thermal_slowdown": 0x40,
    "hw power brake slowdown": 0x80,
    "hw_power_brake_slowdown": 0x80,
    "display clock setting": 0x100,
    "display_clocks_setting": 0x100,
    "display_clock_setting": 0x100,
}
THROTTLE_METRIC = D + "CLOCK_THROTTLE_REASONS"

IDENTITY = {
    "product name": "model",
    "product_name": "model",
    "serial number": "serial",
    "serial": "serial",
    "gpu uuid": "uuid",
    "uuid": "uuid",
    "vbios version": "vbios_version",
    "vbios_version": "vbios_version",
    "pci/bus id": "pci",
    "pci/pci_bus_id": "pci",
    "pci_bus_id": "pci",
    "driver version": "driver_version",
    "driver_version": "driver_version",
    "timestamp": "timestamp",
    "minor number": "minor_number",
    "minor_number": "minor_number",
}


@dataclass
class GpuDoc:
    """What one document says about one GPU."""

    index: int | None
    pci: str | None = None
    ident: dict[str, str] = field(default_factory=dict)
    values: list[tuple[int, str, str]] = field(default_factory=list)  # line, metric, raw value
    throttle: int | None = None
    throttle_line: int = 0


def value_expr(col: pl.Expr) -> pl.Expr:
    """nvidia-smi value text -> float: numbers with units, hex masks, P-states, Yes/No, Active."""
    s = col.str.strip_chars().str.strip_chars("[]")
    return (
        pl.when(s.str.starts_with("0x"))
        .then(s.str.slice(2).str.to_integer(base=16, strict=False).cast(pl.Float64))
        .when(s.str.contains(r"^-?[0-9]"))
        .then(s.str.extract(r"^(-?[0-9]+(?:\.[0-9]+)?)").cast(pl.Float64, strict=False))
        .when(s.str.contains(r"^P[0-9]+$"))
        .then(s.str.slice(1).cast(pl.Float64, strict=False))
        .when(s.is_in(["Yes", "Active", "Enabled"]))
        .then(pl.lit(1.0))
        .when(s.is_in(["No", "Not Active", "Disabled", "None"]))
        .then(pl.lit(0.0))
    )


def _doc_ts(ident: dict[str, str], ctx: ParseContext) -> tuple[datetime | None, str | None]:
    stamp = ident.get("timestamp")
    if stamp:
        for fmt in ("%a %b %d %H:%M:%S %Y", "%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S"):
            try:
                local = datetime.strptime(stamp.strip(), fmt)
            except ValueError:
                continue
            return to_utc(local, zone_of(ctx))
    return default_ts(ctx)


def docs_to_result(
    docs: list[GpuDoc],
    header: dict[str, str],
    ctx: ParseContext,
    source: Source,
    lines: list[tuple[int, str | None]],
    fmt: str,
) -> ChunkResult:
    """GPU docs of one document -> frames; document-level line accounting."""
    content = [(n, t) for n, t in lines if t is not None and t.strip()]
    docs = [d for d in docs if d.values or d.ident or d.pci]
    if not docs:
        if not content:
            return ChunkResult()
        nos, raws = zip(*content, strict=True)
        reason = f"no GPU data found in this {fmt} document"
        return ChunkResult(quarantine=quarantine_frame(list(nos), list(raws), [reason] * len(nos)))
    ts, flag = _doc_ts(header, ctx)
    obs, gpus = [], []
    for d in docs:
        ident = {
            k: v
            for k, v in {**header, **d.ident}.items()
            if v and v.strip() not in ("N/A", "[N/A]")
        }
        gts, gflag = _doc_ts(ident, ctx) if "timestamp" in d.ident else (ts, flag)
        for line_no, metric, raw in d.values:
            obs.append((gts, gflag, d.index, line_no, metric, raw))
        if d.throttle is not None:
            obs.append((gts, gflag, d.index, d.throttle_line, THROTTLE_METRIC, str(d.throttle)))
        if d.index is None and not (d.pci or ident.keys() & {"uuid", "serial", "model"}):
            continue
        gpus.append(
            {
                "node": ctx.node,
                "gpu_index": d.index,
                "pci_bus_id": normalize_pci(d.pci or ident.get("pci")),
                "uuid": ident.get("uuid"),
                "model": ident.get("model"),
                "serial": ident.get("serial"),
                "driver_version": ident.get("driver_version"),
                "vbios_version": ident.get("vbios_version"),
                "first_seen": gts,
                "last_seen": gts,
                "source": source.value,
                "file": ctx.file,
            }
        )
    tables = (
        {"gpus": conform("gpus", pl.DataFrame(gpus, infer_schema_length=None))} if (gpus) else {}
    )
    if obs:
        frame = (
            pl.DataFrame(
                obs,
                orient="row",
                schema={
                    "ts": TS,
                    "ts_flag": pl.String,
                    "gpu": pl.Int32,
                    "line": pl.Int64,
                    "metric": pl.String,
                    "raw": pl.String,
                },
            )
            .with_columns(value=value_expr(pl.col("raw")))
            .filter(pl.col("value").is_not_null())
        )
        frame = _derive_ecc_totals(frame)
        tables["telemetry"] = conform(
            "telemetry",
            frame.select("ts", pl.lit(ctx.node).alias("node"), "gpu", "metric", "value"),
        )
        events = _health_events(frame, gpus, ctx, source)
        if events.height:
            tables["events"] = events
    return ChunkResult(tables=tables, parsed=len(content))


def _derive_ecc_totals(frame: pl.DataFrame) -> pl.DataFrame:
    """Hopper-style split ECC counters -> DCGM's SBE/DBE volatile/aggregate totals."""
    split = frame.filter(pl.col("metric").str.starts_with("NVSMI_ECC_"))
    if split.height == 0:
        return frame
    scope = pl.col("metric").str.extract(r"^NVSMI_ECC_(VOLATILE|AGGREGATE)_")
    kind = (
        pl.when(pl.col("metric").str.contains("UNCORRECTABLE"))
        .then(pl.lit("DBE"))
        .when(pl.col("metric").str.contains("CORRECTABLE"))
        .then(pl.lit("SBE"))
    )
    totals = (
        split.with_columns(scope=scope, kind=kind)
        .filter(pl.col("scope").is_not_null() & pl.col("kind").is_not_null())
        .group_by("ts", "ts_flag", "gpu", "scope", "kind")
        .agg(pl.col("value").sum(), pl.col("line").min())
        .with_columns(
            metric=fmt("DCGM_FI_DEV_ECC_{}_{}_TOTAL", "kind", pl.col("scope").str.slice(0, 3)),
            raw=pl.lit(None, pl.String),
        )
    )
    have = set(frame.get_column("metric").unique().to_list())
    totals = totals.filter(~pl.col("metric").is_in(list(have)))
    return pl.concat([frame, totals.select(frame.columns)], how="vertical_relaxed")


_EVENT_RULES = (  # metric, condition on value, kind, subkind, severity, message
    (
        "NVSMI_RESET_REQUIRED",
        1,
        Kind.RESET_REQUIRED,
        "reset_required",
        Severity.ERROR,
        "nvidia-smi: GPU reset required",
    ),
    (
        "NVSMI_DRAIN_AND_RESET_RECOMMENDED",
        1,
        Kind.RESET_REQUIRED,
        "drain_and_reset",
        Severity.CRITICAL,
        "nvidia-smi: drain and reset recommended",
    ),
    (
        D + "ROW_REMAP_FAILURE",
        1,
        Kind.ROW_REMAP,
        "remap_failure",
        Severity.CRITICAL,
        "nvidia-smi: row remapping failure occurred",
    ),
    (
        D + "ROW_REMAP_PENDING",
        1,
        Kind.ROW_REMAP,
        "remap_pending",
        Severity.WARNING,
        "nvidia-smi: row remapping pending (reset to apply)",
    ),
    (
        D + "RETIRED_PENDING",
        1,
        Kind.ECC,
        "page_retirement_pending",
        Severity.WARNING,
        "nvidia-smi: page retirement pending",
    ),
    (
        D + "ECC_DBE_VOL_TOTAL",
        1,
        Kind.ECC,
        "dbe_volatile",
        Severity.ERROR,
        "nvidia-smi: uncorrectable (double-bit) ECC errors since boot",
    ),
)


def _health_events(
    frame: pl.DataFrame, gpus: list[dict[str, Any]], ctx: ParseContext, source: Source
) -> pl.DataFrame:
    pci = {g["gpu_index"]: g["pci_bus_id"] for g in gpus}
    rows = []
    for r in frame.filter(pl.col("value") > 0).iter_rows(named=True):
        for metric, _min, kind, subkind, severity, message in _EVENT_RULES:
            if r["metric"] == metric:
                gpu = pci.get(r["gpu"]) or (None if r["gpu"] is None else str(r["gpu"]))
                rows.append(
                    {
                        "ts": r["ts"],
                        "ts_flag": r["ts_flag"],
                        "node": ctx.node,
                        "gpu": gpu,
                        "gpu_index": r["gpu"],
                        "source": source.value,
                        "kind": kind.value,
                        "subkind": subkind,
                        "severity": severity.value,
                        "message": f"{message} ({r['value']:g})",
                        "attrs": to_json({"metric": metric, "value": r["value"]}),
                        "file": ctx.file,
                        "line": r["line"],
                    }
                )
    return (
        conform("events", pl.DataFrame(rows, infer_schema_length=None))
        if rows
        else (pl.DataFrame())
    )


# -- nvidia-smi -q text ---------------------------------------------------------------------------

_GPU_HDR = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")
_KV = re.compile(r"^(\s*)([^:]+?)\s+:\s?(.*?)\s*$")
_SECTION = re.compile(r"^(\s*)(\S.*?)\s*$")


def _metric_for_path(path: str) -> str | None:
    if path in Q_METRICS:
        return Q_METRICS[path]
    if path.startswith("ecc errors/") and "/" in path[11:]:
        rest = re.sub(r"[^A-Za-z0-9]+", "_", path[11:]).strip("_").upper()
        return f"NVSMI_ECC_{rest}"
    return None


def parse_q_text(
    lines: list[tuple[int, str | None]], ctx: ParseContext, source: Source = Source.NVIDIA_SMI
) -> ChunkResult:
    """``nvidia-smi -q`` text -> rows (see the module docstring)."""
    header: dict[str, str] = {}
    docs: list[GpuDoc] = []
    cur: GpuDoc | None = None
    stack: list[tuple[int, str]] = []  # (indent, section name)
    fragment = False  # grep excerpts: a GPU's position is not its index
    for line_no, text in lines:
        if text is None or not text.strip() or text.startswith("==="):
            continue
        if m := _GPU_HDR.match(text):
            cur = GpuDoc(index=len(docs), pci=m[1])
            docs.append(cur)
            stack = []
            continue
        if text.strip() == "--":  # grep's group separator: the next group is another excerpt
            cur, stack = None, []
            fragment = True
            continue
        kv = _KV.match(text) if " : " in text or text.rstrip().endswith(" :") else None
        indent = len(text) - len(text.lstrip(" \t"))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if kv is None:
            stack.append((indent, text.strip().lower()))
            continue
        key, value = kv[2].strip().lower(), kv[3]
        path = "/".join([s for _, s in stack] + [key])
        if cur is None and indent == 0:
            if key in IDENTITY:
                header[IDENTITY[key]] = value
            continue
        if cur is None:  # a fragment that starts inside a GPU block
            cur = GpuDoc(index=None)
            docs.append(cur)
        _observe(cur, line_no, path, key, value, stack)
    if fragment:  # which GPUs grep kept is unknown: a position says nothing
        for d in docs:
            d.index = None
    return docs_to_result(_by_minor(docs), header, ctx, source, lines, "nvidia-smi -q")


def _by_minor(docs: list[GpuDoc]) -> list[GpuDoc]:
    """A GPU whose place in the document is unknown (an excerpt) takes its minor number
    (``/dev/nvidiaN``, the ``nvidiaN`` dcgm-exporter's ``device`` label names) as its index."""
    for d in docs:
        minor = d.ident.get("minor_number", "").strip()
        if d.index is None and minor.isdigit():
            d.index = int(minor)
    return docs


def _observe(
    cur: GpuDoc, line_no: int, path: str, key: str, value: str, stack: list[tuple[int, str]]
) -> None:
    parent = stack[-1][1] if stack else ""
    if path in IDENTITY or (key in IDENTITY and not stack and key != "timestamp"):
        cur.ident[IDENTITY.get(path) or IDENTITY[key]] = value
        return
    if parent in ("clocks event reasons", "clocks throttle reasons") or (
        len(stack) >= 2 and stack[-2][1] in ("clocks event reasons", "clocks throttle reasons")
    ):
        bit = THROTTLE_BITS.get(key)
        if bit is not None:
            cur.throttle = (cur.throttle or 0) | (bit if value.strip() == "Active" else 0)
            cur.throttle_line = cur.throttle_line or line_no
        return
    metric = _metric_for_path(path)
    if metric is not None:
        cur.values.append((line_no, metric, value))


# -- nvidia-smi -q -x (XML) -----------------------------------------------------------------------

_X_LEAF = re.compile(r"^\s*<([A-Za-z_][\w.-]*)(?:\s[^>]*)?>([^<]*)</\1>\s*$")
_X_EMPTY = re.compile(r"^\s*<([A-Za-z_][\w.-]*)(?:\s[^>]*)?/>\s*$")
_X_OPEN = re.compile(r"^\s*<([A-Za-z_][\w.-]*)((?:\s[^>]*)?)>\s*$")
_X_CLOSE = re.compile(r"^\s*</([A-Za-z_][\w.-]*)>\s*$")
_X_GPU_ID = re.compile(r'\bid="([^"]+)"')


def _x_metric(path: list[str]) -> str | None:
    for n in (3, 2, 1):
        if len(path) >= n and (m := X_METRICS.get("/".join(path[-n:]))):
            return m
    if "ecc_errors" in path:
        i = path.index("ecc_errors")
        rest = "_".join(path[i + 1 :]).upper()
        return f"NVSMI_ECC_{rest}" if len(path) - i > 2 else None
    return None


def parse_q_xml(
    lines: list[tuple[int, str | None]], ctx: ParseContext, source: Source = Source.NVIDIA_SMI
) -> ChunkResult:
    """``nvidia-smi -q -x`` -> rows; works on fragments (unmatched closing tags are ignored)."""
    header: dict[str, str] = {}
    docs: list[GpuDoc] = []
    cur: GpuDoc | None = None
    stack: list[str] = []
    for line_no, text in lines:
        if text is None or not text.strip() or text.lstrip().startswith(("<?", "<!")):
            continue
        if m := _X_CLOSE.match(text):
            if m[1] in stack:
                del stack[stack.index(m[1]) :]
            continue
        if m := _X_OPEN.match(text):
            if m[1] == "gpu":
                pci = _X_GPU_ID.search(m[2])
                cur = GpuDoc(index=len(docs), pci=pci[1] if pci else None)
                docs.append(cur)
                stack = [s for s in stack if s == "nvidia_smi_log"]
            stack.append(m[1])
            continue
        m = _X_LEAF.match(text) or _X_EMPTY.match(text)
        if m is None:
            continue
        tag = m[1]
        value = m[2] if m.re is _X_LEAF else ""
        if cur is None and stack[-1:] == ["nvidia_smi_log"]:
            if tag in IDENTITY:
                header[IDENTITY[tag]] = value
            continue
        if cur is None:
            cur = GpuDoc(index=None)
            docs.append(cur)
        if "mig_device" in stack:
            _x_mig(cur, line_no, stack + [tag], value)
            continue
        _x_observe(cur, line_no, stack + [tag], value)
    return docs_to_result(_by_minor(docs), header, ctx, source, lines, "nvidia-smi -q -x")


_MIG_FB = {"total": "TOTAL", "used": "USED", "free": "FREE", "reserved": "RESERVED"}


def _x_mig(cur: GpuDoc, line_no: int, path: list[str], value: str) -> None:
    """A MIG device's leaves: its GPU instance id, and its own frame-buffer memory as separate
    series (``NVSMI_MIG_GI<id>_FB_USED``, ...), never as the whole GPU's ``FB_*``."""
    tag = path[-1]
    if tag == "gpu_instance_id":
        cur.ident["_mig_gi"] = value.strip()
        return
    if len(path) >= 2 and path[-2] == "fb_memory_usage" and tag in _MIG_FB:
        gi = cur.ident.get("_mig_gi", "")
        if gi.isdigit():
            cur.values.append((line_no, f"NVSMI_MIG_GI{gi}_FB_{_MIG_FB[tag]}", value))


def _x_observe(cur: GpuDoc, line_no: int, path: list[str], value: str) -> None:
    tag, parent = path[-1], (path[-2] if len(path) > 1 else "")
    ident = IDENTITY.get(f"{parent}/{tag}") or (
        IDENTITY.get(tag)
        if len(path) <= 2
        or tag in ("product_name", "uuid")
        or (tag in ("serial", "minor_number") and parent == "gpu")
        else None
    )
    if ident and ident != "timestamp":
        cur.ident[ident] = value
        return
    reason = re.sub(r"^clocks_(throttle|event)_reason_", "", tag)
    if parent in ("clocks_throttle_reasons", "clocks_event_reasons") or reason != tag:
        bit = THROTTLE_BITS.get(reason)
        if bit is not None:
            cur.throttle = (cur.throttle or 0) | (bit if value.strip() == "Active" else 0)
            cur.throttle_line = cur.throttle_line or line_no
        return
    metric = _x_metric(path)
    if metric is not None:
        cur.values.append((line_no, metric, value))


# -- parser objects -------------------------------------------------------------------------------


class DocParser:
    """A whole-document nvidia-smi parser: subclasses set ``name``, ``_parse`` and ``sniff``."""

    source = Source.NVIDIA_SMI
    whole_file = True
    fmt = ""

    def _parse(self, lines: list[tuple[int, str | None]], ctx: ParseContext) -> ChunkResult:
        raise NotImplementedError

    def parse_line(self, line: str, ctx: ParseContext) -> Parsed | Quarantined | None:
        result = self._parse([(1, line)], ctx)
        if result.quarantined:
            return Quarantined(result.quarantine["reason"][0])
        rows = {k: v.to_dicts() for k, v in result.tables.items() if v.height}
        return Parsed(rows) if rows else None

    def new_state(self, ctx: ParseContext) -> Any:
        return None

    def parse_chunk(
        self, lines: pl.Series, first_line: int, ctx: ParseContext, state: Any
    ) -> ChunkResult:
        return self._parse(list(enumerate(lines.to_list(), start=first_line)), ctx)

    def finish(self, ctx: ParseContext, state: Any) -> ChunkResult:
        return ChunkResult()


class NvidiaSmiQParser(DocParser):
    name = "nvidia_smi_q"

    def sniff(self, head_lines: list[str], path: str) -> float:
        text = "\n".join(head_lines[:80])
        if "==============NVSMI LOG==============" in text and "<" not in text[:200]:
            return 0.9
        kv = sum(1 for ln in head_lines[:80] if re.match(r"^\s{4,}[A-Z][\w .()/-]* +: ", ln))
        known = re.search(
            r"^\s+(Product Name|GPU UUID|Serial Number|Retired Pages|Clocks|"
            r"Enforced Power Limit|Remapped Rows|Bus Id|Minor Number|Temperature|"
            r"GPU Current Temp|ECC Errors|FB Memory Usage|Power Readings|GPU Power Readings)\b",
            text,
            re.M,
        )
        # a ``nvidia-smi -q | grep -A N`` piece: its lines are GPU headers, sections, leaves
        # and grep's ``--`` group separators, nothing else
        lines = [ln for ln in head_lines[:80] if ln.strip()]
        shaped = sum(
            1
            for ln in lines
            if ln.strip() == "--" or _GPU_HDR.match(ln) or _KV.match(ln) or ln.startswith("    ")
        )
        if known and kv >= 2 and lines and shaped == len(lines):
            return 0.6
        return 0.6 if known and kv >= 3 else 0.0

    def _parse(self, lines: list[tuple[int, str | None]], ctx: ParseContext) -> ChunkResult:
        return parse_q_text(lines, ctx)


class NvidiaSmiXmlParser(DocParser):
    name = "nvidia_smi_xml"

    def sniff(self, head_lines: list[str], path: str) -> float:
        text = "\n".join(head_lines[:80])
        if "<nvidia_smi_log" in text:
            return 0.95
        tags = sum(1 for ln in head_lines[:80] if _X_LEAF.match(ln) or _X_CLOSE.match(ln))
        gpuish = re.search(
            r"<(clocks_throttle_reasons|fb_memory_usage|replay_counter|"
            r"product_name|gpu_temp|pci_bus_id|performance_state)>",
            text,
        )
        return 0.7 if gpuish and tags >= 3 else 0.0

    def _parse(self, lines: list[tuple[int, str | None]], ctx: ParseContext) -> ChunkResult:
        return parse_q_xml(lines, ctx)


PARSERS = [NvidiaSmiQParser(), NvidiaSmiXmlParser()]

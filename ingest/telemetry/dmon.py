"""Rolling monitor tables: ``nvidia-smi dmon``, ``nvidia-smi pmon`` and ``dcgmi dmon``.

- ``nvidia_smi_dmon`` (streams): a ``#``-prefixed header of column names (``# gpu pwr gtemp ...``)
  and a ``#``-prefixed units line (``# Idx W C ...``), reprinted every so often, then one row per
  GPU per sample. The columns follow ``-s`` (p: pwr gtemp mtemp; u: sm mem enc dec [jpg ofa];
  c: mclk pclk; v: pviol tviol; m: fb bar1 [ccpm]; e: sbecc dbecc pci; t: rxpci txpci);
  ``-o D`` / ``-o T`` put ``Date`` (YYYYMMDD) / ``Time`` (HH:MM:SS) first. ``--format csv``
  separates the same fields with commas (``nounit`` drops the units line; ``noheader`` drops the
  header, and then ``--columns`` names the fields). ``-`` is a value the GPU does not report.
  Columns map to the DCGM field names the other nvidia-smi readers use (``pwr`` ->
  ``DCGM_FI_DEV_POWER_USAGE``, ``sm`` -> ``DCGM_FI_DEV_GPU_UTIL``, ``fb`` ->
  ``DCGM_FI_DEV_FB_USED`` in MiB, ``rxpci`` MB/s -> ``DCGM_FI_DEV_PCIE_RX_THROUGHPUT`` KB/s, ...);
  quantities DCGM has no field for keep an ``NVSMI_*`` name (``jpg`` -> ``NVSMI_JPG_UTIL``).
- ``nvidia_smi_pmon`` (streams): the per-process table (``# gpu pid type sm mem enc dec ...
  command``). The telemetry table has no process column, so its lines are recognized and counted
  as noise.
- ``dcgmi_dmon`` (streams): ``#Entity`` then DCGM's short field tags (``GPUTL POWER TMPTR``), an
  ``ID`` units line, and rows ``GPU 0   12   61.482   33``; ``N/A`` is a value not available.
  Tags map to DCGM field names by DCGM's own field table (``dcgm_fields.cpp``: tag ``TMPTR`` is
  ``DCGM_FI_DEV_GPU_TEMP``, ``SMACT`` is ``DCGM_FI_PROF_SM_ACTIVE``, ``XIDER`` is
  ``DCGM_FI_DEV_XID_ERRORS``, ...); an ``XIDER`` change becomes an Xid event as for dcgm-exporter.
  Rows of entities other than a GPU (``GPU-I``, ``Switch``, ``Link``, ...) are quarantined:
  telemetry is per GPU index and such a row does not name one.

Time: only a row with both ``Date`` and ``Time`` (``-o DT``) has one; it is host local time, UTC
unless ``tz``, as nvidia-smi's other stamps are (a time ``tz`` has twice or never is not guessed:
the row's samples keep ``ts`` NULL, as untimed rows do; the telemetry table has no flag column).
Every other row's samples keep ``ts`` NULL (and an Xid event from them has ``ts_flag`` ``no_ts``):
the rows of a rolling table are a series, so stamping them all with the file's mtime would turn
minutes of samples into one false snapshot. NULL-time telemetry is counted as untimed by
``event_summary``. None of these outputs names its host: the node is ``--node`` /
``--node-from-path``, never guessed from a folder.

Accounting: header and units lines and well-formed rows are parsed; a row before any header, with
the wrong number of fields, a non-numeric value or an unparsable Date/Time is quarantined with the
reason; other ``#`` lines and blank lines are noise. ``parse_line`` runs the chunk path over one
line (the same code: a lone row has no header, so it is quarantined as such).
"""

from __future__ import annotations

import dataclasses
import logging
import re
from typing import Any

import polars as pl

from faultlens.ingest.base import (
    QUARANTINE_SCHEMA,
    ChunkResult,
    ParseContext,
    Parsed,
    Quarantined,
    fmt,
    line_series,
    numbered,
)
from faultlens.ingest.schema import TS, Source
from faultlens.ingest.telemetry.common import (
    conform_labels,
    conform_samples,
    samples_to_tables,
)
from faultlens.ingest.telemetry.nvsmi import D
from faultlens.ingest.zones import localize, zone_flag, zone_of

log = logging.getLogger(__name__)

P = "DCGM_FI_PROF_"
# nvidia-smi dmon column -> metric (DCGM field name where DCGM has the same quantity and unit).
DMON_METRICS = {
    "pwr": D + "POWER_USAGE",  # W
    "gtemp": D + "GPU_TEMP",  # C
    "mtemp": D + "MEMORY_TEMP",  # C
    "sm": D + "GPU_UTIL",  # % (nvidia-smi's utilization.gpu)
    "mem": D + "MEM_COPY_UTIL",  # % (utilization.memory)
    "enc": D + "ENC_UTIL",
    "dec": D + "DEC_UTIL",
    "jpg": "NVSMI_JPG_UTIL",
    "ofa": "NVSMI_OFA_UTIL",
    "mclk": D + "MEM_CLOCK",  # MHz
    "pclk": "NVSMI_CLOCKS_GRAPHICS_MHZ",  # the graphics clock, as clocks.gr
    "pviol": "NVSMI_POWER_VIOLATION_PCT",  # % of the interval (DCGM's counter is in us)
    "tviol": "NVSMI_THERMAL_VIOLATION",
    "fb": D + "FB_USED",  # MiB
    "bar1": D + "BAR1_USED",  # MiB
    "ccpm": "NVSMI_CCPM_USED_MIB",  # confidential-compute protected memory
    "sbecc": D + "ECC_SBE_VOL_TOTAL",
    "dbecc": D + "ECC_DBE_VOL_TOTAL",
    "pci": D + "PCIE_REPLAY_COUNTER",
    "rxpci": D + "PCIE_RX_THROUGHPUT",  # MB/s here, KB/s in DCGM
    "txpci": D + "PCIE_TX_THROUGHPUT",
}
DMON_SCALE = {"rxpci": 1000.0, "txpci": 1000.0}  # dmon's MB/s -> DCGM's KB/s
# The first token of a dmon units line (the row under the header).
DMON_UNIT_FIRST = ("Idx", "YYYYMMDD", "HH:MM:SS")

# dcgmi dmon header tag (DCGM's field short name) -> DCGM field name.
DCGMI_TAGS = {
    "TMPTR": D + "GPU_TEMP",
    "MMTMP": D + "MEMORY_TEMP",
    "POWER": D + "POWER_USAGE",
    "PMLMT": D + "POWER_MGMT_LIMIT",
    "EPLMT": D + "ENFORCED_POWER_LIMIT",
    "TOTEC": D + "TOTAL_ENERGY_CONSUMPTION",
    "GPUTL": D + "GPU_UTIL",
    "MCUTL": D + "MEM_COPY_UTIL",
    "ECUTL": D + "ENC_UTIL",
    "DCUTL": D + "DEC_UTIL",
    "SMCLK": D + "SM_CLOCK",
    "MMCLK": D + "MEM_CLOCK",
    "VICLK": D + "VIDEO_CLOCK",
    "SACLK": D + "APP_SM_CLOCK",
    "MACLK": D + "APP_MEM_CLOCK",
    "SMMAX": D + "MAX_SM_CLOCK",
    "MMMAX": D + "MAX_MEM_CLOCK",
    "DVCCTR": D + "CLOCK_THROTTLE_REASONS",
    "PSTAT": D + "PSTATE",
    "FANSP": D + "FAN_SPEED",
    "FBTTL": D + "FB_TOTAL",
    "FBFRE": D + "FB_FREE",
    "FBUSD": D + "FB_USED",
    "FBRSV": D + "FB_RESERVED",
    "FBUSP": D + "FB_USED_PERCENT",
    "B1TTL": D + "BAR1_TOTAL",
    "B1USE": D + "BAR1_USED",
    "B1FRE": D + "BAR1_FREE",
    "ESVTL": D + "ECC_SBE_VOL_TOTAL",
    "EDVTL": D + "ECC_DBE_VOL_TOTAL",
    "ESATL": D + "ECC_SBE_AGG_TOTAL",
    "EDATL": D + "ECC_DBE_AGG_TOTAL",
    "RPSBE": D + "RETIRED_SBE",
    "RPDBE": D + "RETIRED_DBE",
    "RPPEN": D + "RETIRED_PENDING",
    "CRMPS": D + "CORRECTABLE_REMAPPED_ROWS",
    "URMPS": D + "UNCORRECTABLE_REMAPPED_ROWS",
    "RRF": D + "ROW_REMAP_FAILURE",
    "RRP": D + "ROW_REMAP_PENDING",
    "XIDER": D + "XID_ERRORS",
    "PCILG": D + "PCIE_LINK_GEN",
    "PCILW": D + "PCIE_LINK_WIDTH",
    "PCIMG": D + "PCIE_MAX_LINK_GEN",
    "PCIMW": D + "PCIE_MAX_LINK_WIDTH",
    "RPCTR": D + "PCIE_REPLAY_COUNTER",
    "TXTPT": D + "PCIE_TX_THROUGHPUT",
    "RXTPT": D + "PCIE_RX_THROUGHPUT",
    "PVIOL": D + "POWER_VIOLATION",
    "TVIOL": D + "THERMAL_VIOLATION",
    "SBVIO": D + "SYNC_BOOST_VIOLATION",
    "BLVIO": D + "BOARD_LIMIT_VIOLATION",
    "LUVIO": D + "LOW_UTIL_VIOLATION",
    "RVIOL": D + "RELIABILITY_VIOLATION",
    "NFELT": D + "NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "NDELT": D + "NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
    "NRELT": D + "NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    "NRCLT": D + "NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
    "NBWLT": D + "NVLINK_BANDWIDTH_TOTAL",
    "GRACT": P + "GR_ENGINE_ACTIVE",
    "SMACT": P + "SM_ACTIVE",
    "SMOCC": P + "SM_OCCUPANCY",
    "TENSO": P + "PIPE_TENSOR_ACTIVE",
    "DRAMA": P + "DRAM_ACTIVE",
    "FP64A": P + "PIPE_FP64_ACTIVE",
    "FP32A": P + "PIPE_FP32_ACTIVE",
    "FP16A": P + "PIPE_FP16_ACTIVE",
    "PCITX": P + "PCIE_TX_BYTES",
    "PCIRX": P + "PCIE_RX_BYTES",
    "NVLTX": P + "NVLINK_TX_BYTES",
    "NVLRX": P + "NVLINK_RX_BYTES",
}
for _link in range(12):
    for _tag, _field in (
        ("NFEL", "NVLINK_CRC_FLIT_ERROR_COUNT_L"),
        ("NDEL", "NVLINK_CRC_DATA_ERROR_COUNT_L"),
        ("NREL", "NVLINK_REPLAY_ERROR_COUNT_L"),
        ("NRCL", "NVLINK_RECOVERY_ERROR_COUNT_L"),
        ("NBWL", "NVLINK_BANDWIDTH_L"),
    ):
        DCGMI_TAGS[f"{_tag}{_link}"] = f"{D}{_field}{_link}"

NA = ("-", "N/A", "[N/A]", "NA")
_SEP = r"[\s,]+"
_DMON_HEADER = r"^\s*#\s*(?:Date[\s,]+)?(?:Time[\s,]+)?gpu\b"
_PMON_HEADER = r"^\s*#\s*(?:Date[\s,]+)?(?:Time[\s,]+)?gpu[\s,]+pid[\s,]+type\b"
_DCGMI_HEADER = r"^\s*#\s*Entity\b"
# dcgmi dmon rows: the entity (``GPU 0``, ``GPU-I 3``, ``Switch 0``, ...) then the values.
_DCGMI_ROW = r"^\s*([A-Za-z][A-Za-z-]*)\s+([0-9]+)\s+(\S.*?)\s*$"
_DCGMI_UNITS = r"^\s*#?\s*(?:ID|Id)\b"


def _tokens(expr: pl.Expr) -> pl.Expr:
    """A line's fields, with the leading ``#`` and commas / runs of blanks as separators."""
    return expr.str.strip_chars(" \t\r#,").str.replace_all(_SEP, " ").str.split(" ")


def _empty_quarantine() -> pl.DataFrame:
    return pl.DataFrame(schema=QUARANTINE_SCHEMA)


@dataclasses.dataclass
class _State:
    header: list[str] | None = None  # the fields of the last header line
    kind: str = "dmon"  # dmon / pmon: what the last header opened
    xid: dict = dataclasses.field(default_factory=dict)


def _segment_headers(frame: pl.DataFrame, state: _State) -> pl.DataFrame:
    """``frame`` (with ``is_header``, ``tok``, ``kind``) with each line's governing header
    (``hdr``) and table kind; the state carries the last header into the next chunk."""
    frame = frame.with_columns(seg=pl.col("is_header").cast(pl.Int64).cum_sum())
    heads = frame.filter(pl.col("is_header")).select("seg", hdr="tok", hkind="kind")
    first = pl.DataFrame(
        {"seg": [0], "hdr": [state.header], "hkind": [state.kind]},
        schema={"seg": pl.Int64, "hdr": pl.List(pl.String), "hkind": pl.String},
    )
    heads = pl.concat([first, heads])
    if heads.height > 1:
        last = heads.row(heads.height - 1, named=True)
        state.header, state.kind = list(last["hdr"]), last["hkind"]
    return frame.join(heads, on="seg", how="left")


def _long_values(data: pl.DataFrame, names: dict[str, str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Rows (``line``, ``ts``, ``gpu``, ``vals``, ``cols``) -> long samples of mapped columns
    (``line``, ``ts``, ``gpu``, ``col``, ``tok``, ``value``) and the lines with a value that
    is not a number (``line``, ``reason``)."""
    long = (
        data.select("line", "ts", "gpu", tok="vals", col="cols")
        .explode("tok", "col")
        .filter(pl.col("col").is_in(list(names)))
    )
    value = pl.col("tok").str.strip_chars().cast(pl.Float64, strict=False)
    long = long.with_columns(value=pl.when(~pl.col("tok").is_in(NA)).then(value))
    bad = (
        long.filter(pl.col("value").is_null() & ~pl.col("tok").is_in(NA))
        .group_by("line")
        .agg(pl.col("col").first(), pl.col("tok").first())
        .select("line", fmt("non-numeric value '{}' in column {}", "tok", "col").alias("reason"))
    )
    return long, bad


def _to_result(
    frame: pl.DataFrame,
    long: pl.DataFrame,
    parsed: pl.Series,
    quarantine: pl.DataFrame,
    names: dict[str, str],
    scale: dict[str, float],
    ctx: ParseContext,
    state: _State,
    source: Source,
) -> ChunkResult:
    """Long samples -> telemetry / gpus / events through the shared sample path."""
    bad_lines = quarantine.get_column("line")
    long = long.filter(~pl.col("line").is_in(bad_lines.implode()) & pl.col("value").is_not_null())
    if scale:
        factor = pl.col("col").replace_strict(scale, default=1.0, return_dtype=pl.Float64)
        long = long.with_columns(value=pl.col("value") * factor)
    long = long.with_columns(metric=pl.col("col").replace_strict(names, return_dtype=pl.String))
    tables: dict[str, pl.DataFrame] = {}
    if long.height:
        series = long.select("metric", "gpu").unique(maintain_order=True).with_row_index("key")
        series = series.with_columns(pl.col("key").cast(pl.Int64))
        samples = long.join(series, on=["metric", "gpu"], how="left")
        labels = conform_labels(series.with_columns(pl.col("gpu").cast(pl.String)))
        # no mtime / scrape time: a sample without its own stamp keeps ts NULL (see above)
        untimed = dataclasses.replace(ctx, mtime=None, options={})
        tables = samples_to_tables(
            conform_samples(samples), labels, untimed, source=source, xid_state=state.xid
        )
        if "events" in tables:
            tables["events"] = tables["events"].with_columns(
                ts_flag=pl.when(pl.col("ts").is_null()).then(pl.lit("no_ts"))
            )
    raws = frame.select("line", "raw")
    q = quarantine.join(raws, on="line", how="left").select(
        "line", pl.col("raw").str.slice(0, 4000), "reason"
    )
    return ChunkResult(
        tables=tables,
        parsed=parsed.len(),
        quarantine=q if q.height else None,
        parsed_lines=parsed,
    )


# -- nvidia-smi dmon / pmon ----------------------------------------------------------------------


def _dmon_chunk(lines: pl.Series, first_line: int, ctx: ParseContext, state: _State) -> ChunkResult:
    frame = numbered(lines, first_line).filter(
        pl.col("raw").is_not_null() & (pl.col("raw").str.strip_chars() != "")
    )
    comment = pl.col("raw").str.strip_chars_start().str.starts_with("#")
    frame = frame.with_columns(
        tok=_tokens(pl.col("raw")),
        comment=comment,
        is_header=comment & pl.col("raw").str.contains(_DMON_HEADER),
        kind=pl.when(pl.col("raw").str.contains(_PMON_HEADER))
        .then(pl.lit("pmon"))
        .otherwise(pl.lit("dmon")),
    )
    if state.header is None and ctx.columns:
        state.header = [c.strip().lstrip("#").strip() for c in ctx.columns]
    frame = _segment_headers(frame, state)
    is_units = pl.col("comment") & pl.col("tok").list.first().is_in(DMON_UNIT_FIRST)
    dmon = pl.col("hkind") == "dmon"
    structure = frame.filter(dmon & (pl.col("is_header") | is_units)).get_column("line")
    rows = frame.filter(~pl.col("comment") & dmon)
    no_header = rows.filter(pl.col("hdr").is_null()).select(
        "line",
        reason=pl.lit("nvidia-smi dmon row before any header line (noheader: give --columns)"),
    )
    rows = rows.filter(pl.col("hdr").is_not_null())
    n_ok = pl.col("tok").list.len() == pl.col("hdr").list.len()
    wrong = rows.filter(~n_ok).select(
        "line",
        reason=fmt(
            "expected {} dmon fields, found {}", pl.col("hdr").list.len(), pl.col("tok").list.len()
        ),
    )
    rows = rows.filter(n_ok)

    def field(name: str) -> pl.Expr:
        pos = pl.col("hdr").list.eval(pl.element() == name).list.arg_max()
        has = pl.col("hdr").list.contains(name)
        return pl.when(has).then(pl.col("tok").list.get(pos, null_on_oob=True))

    date, time, gpu = field("Date"), field("Time"), field("gpu")
    stamp = pl.concat_str([date, pl.lit(" "), time]).str.to_datetime(
        "%Y%m%d %H:%M:%S", strict=False, time_unit="us"
    )
    rows = rows.with_columns(
        ts=stamp.cast(TS),
        gpu=gpu.cast(pl.Int32, strict=False),
        has_dt=date.is_not_null() & time.is_not_null(),
        gpu_raw=gpu,
    )
    bad_time = rows.filter(pl.col("has_dt") & pl.col("ts").is_null()).select(
        "line", reason=pl.lit("unparsable dmon Date/Time")
    )
    if tz := zone_of(ctx):  # the host's wall clock; a time it has twice / never stays NULL
        unplaced = rows.filter(zone_flag(pl.col("ts"), tz).is_not_null()).height
        if unplaced:
            log.warning(
                "%s: %d dmon rows at a time %s has twice or never (the hour its clocks change)"
                " kept without a time",
                ctx.file,
                unplaced,
                tz,
            )
        rows = rows.with_columns(ts=localize(pl.col("ts"), tz))
    bad_gpu = rows.filter(pl.col("gpu").is_null()).select(
        "line", reason=pl.lit("dmon row without a GPU index")
    )
    long, bad_value = _long_values(
        rows.select("line", "ts", "gpu", vals="tok", cols="hdr"), DMON_METRICS
    )
    quarantine = (
        pl.concat([no_header, wrong, bad_time, bad_gpu, bad_value])
        .unique("line", keep="first", maintain_order=True)
        .sort("line")
    )
    ok_rows = rows.filter(~pl.col("line").is_in(quarantine.get_column("line").implode()))
    parsed = line_series(pl.concat([structure, ok_rows.get_column("line")]).sort())
    return _to_result(
        frame,
        long,
        parsed,
        quarantine,
        DMON_METRICS,
        DMON_SCALE,
        ctx,
        state,
        Source.NVIDIA_SMI,
    )


def _first_content(head_lines: list[str], n: int = 20) -> list[str]:
    return [ln for ln in head_lines if ln and ln.strip()][:n]


class _StreamParser:
    source = Source.NVIDIA_SMI
    whole_file = False

    def new_state(self, ctx: ParseContext) -> Any:
        return _State()

    def parse_line(self, line: str, ctx: ParseContext) -> Parsed | Quarantined | None:
        state = self.new_state(ctx)
        return self.parse_chunk(pl.Series([line], dtype=pl.String), 1, ctx, state).to_line_result()

    def parse_chunk(
        self, lines: pl.Series, first_line: int, ctx: ParseContext, state: Any
    ) -> ChunkResult:
        raise NotImplementedError

    def finish(self, ctx: ParseContext, state: Any) -> ChunkResult:
        return ChunkResult()


class NvidiaSmiDmonParser(_StreamParser):
    name = "nvidia_smi_dmon"

    def sniff(self, head_lines: list[str], path: str) -> float:
        lines = _first_content(head_lines)
        heads = [ln for ln in lines if re.match(_DMON_HEADER, ln)]
        if not heads or any(re.match(_PMON_HEADER, ln) for ln in heads):
            return 0.0
        fields = set(re.split(_SEP, heads[0].strip(" \t#,")))
        return 0.9 if fields & set(DMON_METRICS) else 0.0

    def parse_chunk(
        self, lines: pl.Series, first_line: int, ctx: ParseContext, state: Any
    ) -> ChunkResult:
        return _dmon_chunk(lines, first_line, ctx, state)


class NvidiaSmiPmonParser(_StreamParser):
    """Recognized so that a pmon capture is not "format not recognized"; every line is noise."""

    name = "nvidia_smi_pmon"

    def sniff(self, head_lines: list[str], path: str) -> float:
        lines = _first_content(head_lines)
        return 0.9 if any(re.match(_PMON_HEADER, ln) for ln in lines) else 0.0

    def parse_chunk(
        self, lines: pl.Series, first_line: int, ctx: ParseContext, state: Any
    ) -> ChunkResult:
        return ChunkResult(parsed_lines=line_series([]))


# -- dcgmi dmon ----------------------------------------------------------------------------------


def _dcgmi_chunk(
    lines: pl.Series, first_line: int, ctx: ParseContext, state: _State
) -> ChunkResult:
    frame = numbered(lines, first_line).filter(
        pl.col("raw").is_not_null() & (pl.col("raw").str.strip_chars() != "")
    )
    is_header = pl.col("raw").str.contains(_DCGMI_HEADER)
    frame = frame.with_columns(
        # the header's fields after "Entity"
        tok=_tokens(pl.col("raw")).list.slice(1),
        is_header=is_header,
        comment=pl.col("raw").str.strip_chars_start().str.starts_with("#"),
        kind=pl.lit("dmon"),
    )
    if state.header is None and ctx.columns:
        state.header = [c.strip() for c in ctx.columns if c.strip().lower() != "entity"]
    frame = _segment_headers(frame, state)
    units = ~pl.col("is_header") & pl.col("raw").str.contains(_DCGMI_UNITS)
    structure = frame.filter(pl.col("is_header") | units).get_column("line")
    m = pl.col("raw").str.extract_groups(_DCGMI_ROW)
    rows = frame.filter(~pl.col("is_header") & ~units & ~pl.col("comment")).with_columns(
        entity=m.struct.field("1"),
        eid=m.struct.field("2"),
        vals=m.struct.field("3").str.split(" ").list.eval(pl.element().filter(pl.element() != "")),
    )
    unknown = rows.filter(pl.col("entity").is_null()).select(
        "line", reason=pl.lit("unrecognized dcgmi dmon line")
    )
    rows = rows.filter(pl.col("entity").is_not_null())
    no_header = rows.filter(pl.col("hdr").is_null()).select(
        "line", reason=pl.lit("dcgmi dmon row before any #Entity header line")
    )
    rows = rows.filter(pl.col("hdr").is_not_null())
    not_gpu = rows.filter(pl.col("entity").str.to_uppercase() != "GPU").select(
        "line",
        reason=fmt("dcgmi dmon row for entity {}: telemetry holds GPUs only", pl.col("entity")),
    )
    rows = rows.filter(pl.col("entity").str.to_uppercase() == "GPU")
    n_ok = pl.col("vals").list.len() == pl.col("hdr").list.len()
    wrong = rows.filter(~n_ok).select(
        "line",
        reason=fmt(
            "expected {} dcgmi dmon values, found {}",
            pl.col("hdr").list.len(),
            pl.col("vals").list.len(),
        ),
    )
    rows = rows.filter(n_ok).with_columns(
        gpu=pl.col("eid").cast(pl.Int32, strict=False), ts=pl.lit(None, TS)
    )
    long, bad_value = _long_values(rows.select("line", "ts", "gpu", "vals", cols="hdr"), DCGMI_TAGS)
    quarantine = (
        pl.concat([unknown, no_header, not_gpu, wrong, bad_value])
        .unique("line", keep="first", maintain_order=True)
        .sort("line")
    )
    ok_rows = rows.filter(~pl.col("line").is_in(quarantine.get_column("line").implode()))
    parsed = line_series(pl.concat([structure, ok_rows.get_column("line")]).sort())
    return _to_result(frame, long, parsed, quarantine, DCGMI_TAGS, {}, ctx, state, Source.DCGM)


class DcgmiDmonParser(_StreamParser):
    name = "dcgmi_dmon"
    source = Source.DCGM

    def sniff(self, head_lines: list[str], path: str) -> float:
        lines = _first_content(head_lines)
        for ln in lines:
            if re.match(_DCGMI_HEADER, ln):
                tags = set(re.split(_SEP, ln.strip(" \t#,"))[1:])
                return 0.9 if tags & set(DCGMI_TAGS) or not tags else 0.6
        return 0.0

    def parse_chunk(
        self, lines: pl.Series, first_line: int, ctx: ParseContext, state: Any
    ) -> ChunkResult:
        return _dcgmi_chunk(lines, first_line, ctx, state)


PARSERS = [NvidiaSmiDmonParser(), NvidiaSmiPmonParser(), DcgmiDmonParser()]

"""Kernel logs with NVIDIA driver (NVRM) and host RAS messages, in every form a node writes them.

Formats (one parser ``kernel`` for all text forms; the stamp is read per line, so mixed files work):
dmesg ``[  123.456789]`` (boot-relative), ``dmesg -T`` ``[Sat Oct 12 18:35:32 2024]``,
``dmesg --time-format iso`` (with or without ``--decode``), syslog RFC 3164 (``Feb 14 05:03:41 host
kernel: ...``; also journalctl short), RFC 5424 / ISO 8601 (rsyslog, journalctl short-iso), bare
kmsg text (no stamp), ``/dev/kmsg`` records (``6,3964,206764307,-;msg``, microseconds since boot),
``dmesg -r`` / pstore dumps (``<4>[  123.456789] msg``: a priority before a dmesg stamp is no syslog
header) and the Go log stamps of the NVIDIA k8s-device-plugin. ``journal_json`` reads
``journalctl -o json``, ``-o json-seq`` (each object after an RS byte) and ``-o json-sse``
(``data: {...}`` lines between blank ones); ``kernel.journal`` the record formats (``export``,
``verbose``, ``json-pretty``);
``k8s_device_plugin`` is the same parser under the name that sniffs device-plugin logs.

Events (table ``events``): Xid (also the old form without ``PCI:``), NVLink Xid 144-150 (kind
nvlink, subkind Fatal/Nonfatal, link/unit/data words in attrs; any spacing), Xid 119 (kind
gsp_timeout), Xid 154 (severity and action of the recovery it names: ``GPU Reset Required`` ->
error / reset_gpu, ``Node Reboot Required`` / ``OS Reboot`` -> critical / reboot_node, ``Drain and
Reset`` / ``Drain P2P`` -> critical / drain_node, ``None`` -> info), NVSwitch SXid (an untagged
detail line takes its tagged line's severity; alone, warning), the multi-line "has fallen off the
bus" record (one event, all its lines counted as parsed), RmInitAdapter / probe failures, GSP RPC
timeouts, GSP / LibOS heartbeat losses and RM's RC watchdog without an Xid (gsp_timeout /
heartbeat, rc_watchdog), NV_ERR_RESET_REQUIRED, PCIe AER, EDAC CE/UE,
APEI/GHES blocks (one event per ``{N}[Hardware Error]`` record), MCE, mlx5 port state and
``ibN: lost carrier``, hung tasks, device-plugin ``XidCriticalError`` / ``device marked unhealthy``,
and (``families``) mlx5 health ``Fatal error`` and port-module events (ib_port), CPU thermal
throttling (thermal, sub-kind cpu_throttled / cpu_normal), NVMe timeouts and status errors,
block-layer and buffer I/O errors, ext2/3/4 errors and read-only remounts (storage), kernel panics
(kernel_panic; a machine-check panic is mce/panic), oopses (kernel_panic / oops), soft and hard
lockups and RCU stalls (hung_task) and CMCI storms (mce). Kubernetes node conditions (``k8s``) are
read by the ``lines`` reader.
Xid-coded events take severity and action from the Xid catalog.

Speed: the frequent messages (Xid, SXid, device plugin) and every single-line family are extracted
with one regex per family over all candidate lines of a batch; only NVRM / ``[Hardware Error]``
lines other than Xid (rare; some are multi-line records) go through Python one at a time. A batch
whose lines are all plain RFC 3164 (``kern.log``) is stamped with that form's one small regex.

Time: wall stamps are UTC (dmesg -T and RFC 3164 stamps are taken as written; cluster nodes log
in UTC). Year-less stamps take ``--year`` (the first line's year, +1 at each Dec->Jan rollover) or
else the file's mtime (a month later than the mtime's month is last year's). Boot-relative stamps
keep ``ts`` null with ``uptime_s`` and ``ts_flag='boot_relative'``; the loader turns them into wall
time when the boot time is known (``--boot-time``, or learned from the file: an ``rtc_cmos ...
setting system clock to`` line, or a syslog line carrying both a wall stamp and ``[uptime]``).
Lines with no stamp at all get ``ts_flag='no_ts'``.

Accounting: lines without any pre-filter literal are noise without further work. Known NVRM
chatter (module banner, ``GPU at PCI:..: GPU-uuid`` inventory, board serial, GSP RPC history
tables, ``_kgspLogXid119`` banners, the falcon core dump's ``PRI:`` / ``TRACE:`` / ``ICD:`` register
lines after a GSP timeout), mce register dumps, rtc_cmos lines and weak-literal chatter
(mlx5, EDAC, AER, carrier lines without an error shape) are noise. Candidate lines with a strong
literal (NVRM, Xid, PCIe Bus Error, [Hardware Error], NV_ERR_) that match no shape are quarantined.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import polars as pl

from faultlens.ingest.base import (
    ChunkResult,
    LineResult,
    ParseContext,
    Parsed,
    Quarantined,
    line_series,
    normalize_node,
    numbered,
    quarantine_frame,
)
from faultlens.ingest.kernel import patterns as kp
from faultlens.ingest.kernel.families import family_events
from faultlens.ingest.kernel.line import (
    Piece,
    Prefix,
    Record,
    is_candidate,
    parse_prefix,
)
from faultlens.ingest.kernel.misc import assemble, classify_body, finish_record, rtc_boot_time
from faultlens.ingest.kernel.vec import (
    PREFIXED,
    dp_events,
    prefix_frame,
    route_expr,
    sxid_events,
    xid_events,
)
from faultlens.ingest.reader import literal_regex
from faultlens.ingest.schema import EVENTS, Source, conform

_EVENT_SCHEMA = EVENTS.polars_schema
_PY_ROUTES = ("hw", "nvrm")
# The pre-filter: a literal set as one regex (polars' literal-set search is faster than
# ``str.contains_any`` on short lines).
_CANDIDATE = pl.col("raw").str.contains(literal_regex(kp.LITERALS)).fill_null(False)


@dataclass
class KernelState:
    open_recs: dict[str, Record] = field(default_factory=dict)  # multi-line records in progress
    boot_time: datetime | None = None
    last_month: int | None = None  # --year rollover tracking
    year_offset: int = 0
    # the last Fatal / Non-fatal tag per NVSwitch PCI id and SXid code: their untagged detail
    # lines (``Data {...}``, ``Severity 0 Engine instance ...``) take its severity
    sxid_tags: dict[tuple[str, int], str] = field(default_factory=dict)


# -- sniffing --------------------------------------------------------------------------------------

_KERNELISH = re.compile(
    r"^[ \t]*(?:\[ *[0-9]+\.[0-9]+\]|\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) [A-Z][a-z]{2} [ 0-9]"
    r"|[0-9]{1,4},[0-9]+,[0-9]+,[^;]*;|[a-z]{2,8} *:[a-z]{3,6} *: [0-9]{4}-"
    r"|[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8},[0-9]+|NVRM: )"
)
_SYSLOG = re.compile(
    rf"^(?:<[0-9]{{1,3}}>1? ?)?(?:(?:{'|'.join(kp.MONTHS)}) +[0-9]{{1,2}} [0-9:]{{8}}"
    r"|[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}(?:\.[0-9]+)?(?:Z|[+-][0-9:]{4,5})?"
    # journalctl short-full / with-unit, short-unix, short-monotonic / short-delta
    r"|(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) [0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:]{8}(?:\.[0-9]+)? [^ ]+"
    r"|[0-9]{9,11}\.[0-9]{6}|\[ *[0-9]+\.[0-9]{6}(?: <[ 0-9.]+\*?>| +)?\])"
    r"(?:\.[0-9]+)? [^ ]+ (?P<tag>[^ :\[]+)(?:\[[0-9]+\])?: "
)
# RFC 5424 (rsyslog's RSYSLOG_SyslogProtocol23Format, syslog-ng): "<pri>1 ISO host app procid
# msgid sd message"; the app name is the tag, no colon after it
_SYSLOG_5424 = re.compile(
    r"^[ \t]*<[0-9]{1,3}>1 [0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}(?:\.[0-9]+)?(?:Z|[+-][0-9:]{4,5})"
    r" [^ ]+ (?P<tag>[^ ]+) [^ ]+ [^ ]+ (?:-|\[)"
)
_GO_STAMP = re.compile(r"^[0-9]{4}/[0-9]{2}/[0-9]{2} [0-9:]{8}")
_NAME_HINT = re.compile(r"(dmesg|kern|syslog|messages|kmsg|journal)", re.IGNORECASE)


def sniff_text(head_lines: list[str], path: str) -> float:
    lines = [ln for ln in head_lines[:300] if ln.strip()]
    if not lines:
        return 0.0
    n = len(lines)
    kernel = syslog = slurm = 0
    for ln in lines:
        m = _SYSLOG.match(ln) or _SYSLOG_5424.match(ln)
        if m:
            tag = m["tag"]
            if tag == "kernel" or "NVRM" in ln:
                kernel += 1
            elif tag.startswith("slurm"):
                slurm += 1
            else:
                syslog += 1
        elif _KERNELISH.match(ln):
            kernel += 1
    hint = 0.04 if _NAME_HINT.search(path.rsplit("/", 1)[-1]) else 0.0
    if kernel / n >= 0.5:
        return 0.9 + hint
    if kernel and (kernel + syslog) / n >= 0.5:
        return 0.8 + hint
    if syslog / n >= 0.5 and slurm / n < 0.1:
        return 0.5 + hint
    if slurm / n >= 0.5:
        return 0.2
    return 0.3 if kernel else 0.0


def sniff_device_plugin(head_lines: list[str]) -> float:
    lines = [ln for ln in head_lines[:300] if ln.strip()]
    if not lines:
        return 0.0
    go = sum(1 for ln in lines if _GO_STAMP.match(ln))
    dp = sum(
        1
        for ln in lines
        if "XidCriticalError" in ln
        or "device marked unhealthy" in ln
        or "nvidia-device-plugin" in ln
        or "nvidia.com/gpu" in ln
    )
    return 0.92 if go / len(lines) >= 0.5 and dp else 0.0


# -- the chunk path --------------------------------------------------------------------------------


def _empty_events() -> pl.DataFrame:
    return pl.DataFrame(schema=_EVENT_SCHEMA)


def classify_frame(
    pf: pl.DataFrame, ctx: ParseContext, state: KernelState, end_line: int | None
) -> ChunkResult:
    """Prefixed candidate lines -> events, quarantine and the parsed count."""
    pf = pf.with_columns(_route=route_expr())
    frames: list[pl.DataFrame] = []
    qframes: list[pl.DataFrame] = []
    for route in ("xid", "sxid"):
        part = pf.filter(pl.col("_route") == route)
        if part.height:
            if route == "xid":
                ev, q = xid_events(part, ctx.file)
            else:
                ev, q = sxid_events(part, ctx.file, state)
            frames.append(ev)
            qframes.append(q)
    for route in ("dp_xid", "dp_unhealthy"):
        part = pf.filter(pl.col("_route") == route)
        if part.height:
            ev, q = dp_events(part, ctx.file, route)
            frames.append(ev)
            qframes.append(q)
    lines = [f["line"] for f in frames]
    if state.boot_time is None:
        _learn_boot_time(pf, state)
    other = pf.filter(pl.col("_route") == "other")
    py_part = pf.filter(pl.col("_route").is_in(_PY_ROUTES))
    if other.height:
        split = family_events(other, ctx.file)
        frames += split.events
        qframes.append(split.quarantine)
        lines += split.lines
    rows, pieces, quar = _python_routes(py_part, ctx)
    ml_events, ml_quar, ml_lines = assemble(pieces, state.open_recs, ctx, end_line)
    lines.append(line_series([r["line"] for r in rows] + ml_lines))
    rows += ml_events
    quar += ml_quar
    if rows:
        frames.append(pl.DataFrame(rows, schema=_EVENT_SCHEMA))
    if quar:
        qframes.append(quarantine_frame(*(list(x) for x in zip(*quar, strict=True))))
    qframes = [q for q in qframes if q.height]
    events = pl.concat([conform("events", f) for f in frames]) if frames else _empty_events()
    parsed_lines = pl.concat([line_series(x) for x in lines])
    return ChunkResult(
        tables={"events": events} if events.height else {},
        parsed=parsed_lines.len(),
        quarantine=pl.concat(qframes) if qframes else None,
        boot_time=state.boot_time,
        parsed_lines=parsed_lines,
    )


def _learn_boot_time(pf: pl.DataFrame, state: KernelState) -> None:
    """The boot time from the first ``rtc_cmos ... setting system clock to`` line that gives one."""
    rtc = pf.filter(
        pl.col("body").str.contains("setting system clock to", literal=True)
        & pl.col("_route").is_in([*_PY_ROUTES, "other"])
    )
    for body, ts, up, flag, node in rtc.select(
        "body", "ts", "uptime_s", "ts_flag", "node"
    ).iter_rows():
        state.boot_time = rtc_boot_time(
            Prefix(body=body, ts=ts, uptime_s=up, ts_flag=flag, node=node)
        )
        if state.boot_time is not None:
            return


def _python_routes(
    part: pl.DataFrame, ctx: ParseContext
) -> tuple[list[dict[str, Any]], list[Piece], list[Any]]:
    rows: list[dict[str, Any]] = []
    pieces: list[Piece] = []
    quar: list[Any] = []
    for line, raw, body, ts, up, flag, node in part.select(PREFIXED).iter_rows():
        pre = Prefix(body=body, ts=ts, uptime_s=up, ts_flag=flag, node=node)
        out = classify_body(pre, ctx)
        if isinstance(out, dict):
            out["line"] = line
            rows.append(out)
        elif isinstance(out, Quarantined):
            quar.append((line, raw, out.reason))
        elif isinstance(out, Piece):
            out.line, out.raw = line, raw
            pieces.append(out)
    return rows, pieces, quar


def _result_of_line(out: Any, ctx: ParseContext) -> LineResult:
    if isinstance(out, Piece):
        if out.role == "cont":
            return Quarantined("continuation line without its first line")
        events, quar = finish_record(Record([out]), ctx)
        if quar:
            return Quarantined(quar[0][2])
        out = events[0]
    if isinstance(out, dict):
        return Parsed({"events": [out]})
    return out


class KernelParser:
    name = "kernel"
    source = Source.KERNEL
    whole_file = False
    prefilter = kp.LITERALS  # only lines with one of these reach parse_candidates
    raw_scan = True  # found in the raw bytes (ingest.scan): no split of the 95% noise lines

    def sniff(self, head_lines: list[str], path: str) -> float:
        return sniff_text(head_lines, path)

    def new_state(self, ctx: ParseContext) -> KernelState:
        return KernelState()

    def parse_line(self, line: str, ctx: ParseContext) -> LineResult:
        if not line or not is_candidate(line):
            return None
        pre = parse_prefix(line, ctx)
        return _result_of_line(classify_body(pre, ctx), ctx)

    def parse_chunk(
        self, lines: pl.Series, first_line: int, ctx: ParseContext, state: KernelState
    ) -> ChunkResult:
        cand = numbered(lines, first_line).filter(_CANDIDATE)
        return self.parse_candidates(cand, first_line + lines.len() - 1, ctx, state)

    def parse_candidates(
        self, cand: pl.DataFrame, last_line: int, ctx: ParseContext, state: KernelState
    ) -> ChunkResult:
        """The candidate lines (``line``, ``raw``) of a chunk ending at ``last_line``."""
        if cand.height == 0:
            return ChunkResult(boot_time=state.boot_time)
        pf = self.prefixed(cand, ctx, state)
        return classify_frame(pf, ctx, state, last_line)

    def prefixed(self, cand: pl.DataFrame, ctx: ParseContext, state: KernelState) -> pl.DataFrame:
        return prefix_frame(cand, ctx, state)

    def finish(self, ctx: ParseContext, state: KernelState) -> ChunkResult:
        events, quar, parsed = assemble([], state.open_recs, ctx, None)
        q = quarantine_frame(*(list(x) for x in zip(*quar, strict=True))) if quar else None
        tables = {"events": pl.DataFrame(events, schema=_EVENT_SCHEMA)} if events else {}
        return ChunkResult(
            tables=tables,
            parsed=len(parsed),
            quarantine=q,
            boot_time=state.boot_time,
            parsed_lines=line_series(parsed),
        )


class DevicePluginParser(KernelParser):
    """NVIDIA k8s-device-plugin logs (Go log stamps): the kernel parser under its own name."""

    name = "k8s_device_plugin"
    source = Source.K8S

    def sniff(self, head_lines: list[str], path: str) -> float:
        return sniff_device_plugin(head_lines)


# -- journalctl -o json ----------------------------------------------------------------------------

_EPOCH = datetime(1970, 1, 1)
# json-seq (RFC 7464) puts an RS byte before each object; json-sse a ``data: `` field name
_JSON_LEAD = re.compile(r"^(?:\x1e|data: ?)")


def journal_prefix(line: str, ctx: ParseContext) -> Prefix | Quarantined:
    """One ``journalctl -o json`` object (also after json-seq's RS or json-sse's ``data: ``)
    -> the message and its stamps."""
    try:
        obj = json.loads(_JSON_LEAD.sub("", line, count=1))
    except ValueError:
        return Quarantined("not a journal JSON object")
    if not isinstance(obj, dict):
        return Quarantined("not a journal JSON object")
    msg = obj.get("MESSAGE")
    if isinstance(msg, list):  # binary message: a list of byte values
        try:
            msg = bytes(int(b) & 0xFF for b in msg).decode("utf-8", "replace")
        except (TypeError, ValueError):
            msg = None
    if not isinstance(msg, str):
        return Quarantined("journal entry without a text MESSAGE")
    ts = _us_to_dt(obj.get("__REALTIME_TIMESTAMP"))
    mono = obj.get("_SOURCE_MONOTONIC_TIMESTAMP")
    up = int(mono) / 1e6 if isinstance(mono, str) and mono.isdigit() and len(mono) < 16 else None
    host = obj.get("_HOSTNAME")
    node = normalize_node(host) if isinstance(host, str) and host.strip() else ctx.node
    flag = None if ts is not None else ("boot_relative" if up is not None else "no_ts")
    return Prefix(body=msg, ts=ts, uptime_s=up, ts_flag=flag, node=node)


def _us_to_dt(value: Any) -> datetime | None:
    if not (isinstance(value, str) and value.isdigit() and len(value) < 18):
        return None
    try:
        return _EPOCH + timedelta(microseconds=int(value))
    except OverflowError:
        return None


class JournalJsonParser(KernelParser):
    name = "journal_json"

    def sniff(self, head_lines: list[str], path: str) -> float:
        lines = [ln for ln in head_lines[:100] if ln.strip()]
        if not lines:
            return 0.0
        hits = sum(
            1
            for ln in lines
            if _JSON_LEAD.sub("", ln.lstrip(" \t"), count=1).startswith("{")
            and "__REALTIME_TIMESTAMP" in ln
        )
        return 0.95 if hits / len(lines) >= 0.5 else 0.0

    def parse_line(self, line: str, ctx: ParseContext) -> LineResult:
        if not line or not is_candidate(line):
            return None
        pre = journal_prefix(line, ctx)
        if isinstance(pre, Quarantined):
            return pre
        return _result_of_line(classify_body(pre, ctx), ctx)

    def parse_candidates(
        self, cand: pl.DataFrame, last_line: int, ctx: ParseContext, state: KernelState
    ) -> ChunkResult:
        return journal_objects(cand, last_line, ctx, state)


PREFIXED_SCHEMA = {
    "line": pl.Int64,
    "raw": pl.String,
    "body": pl.String,
    "ts": _EVENT_SCHEMA["ts"],
    "uptime_s": pl.Float64,
    "ts_flag": pl.String,
    "node": pl.String,
}


def journal_objects(
    cand: pl.DataFrame, last_line: int | None, ctx: ParseContext, state: KernelState
) -> ChunkResult:
    """Journal JSON objects (``line``: where the event is, ``raw``: the object's text) -> the
    events of their messages; an object that is not one is quarantined at its line."""
    rows: list[dict[str, Any]] = []
    quar: list[Any] = []
    for line_no, raw in cand.select("line", "raw").iter_rows():
        pre = journal_prefix(raw, ctx)
        if isinstance(pre, Quarantined):
            quar.append((line_no, raw, pre.reason))
        else:
            rows.append(
                {
                    "line": line_no,
                    "raw": raw,
                    "body": pre.body,
                    "ts": pre.ts,
                    "uptime_s": pre.uptime_s,
                    "ts_flag": pre.ts_flag,
                    "node": pre.node,
                }
            )
    frame = pl.DataFrame(rows, schema=PREFIXED_SCHEMA)
    extra = quarantine_frame(*(list(x) for x in zip(*quar, strict=True))) if quar else None
    return classify_prefixed(frame, extra, ctx, state, last_line)


def classify_prefixed(
    frame: pl.DataFrame,
    quarantine: pl.DataFrame | None,
    ctx: ParseContext,
    state: KernelState,
    last_line: int | None,
) -> ChunkResult:
    """``classify_frame`` of messages whose stamps a journal record gave (``PREFIXED_SCHEMA``),
    with the records already quarantined."""
    result = classify_frame(frame, ctx, state, last_line)
    if quarantine is not None and quarantine.height:
        result.quarantine = (
            pl.concat([result.quarantine, quarantine])
            if result.quarantine is not None
            else quarantine
        )
    return result


PARSERS = [KernelParser(), JournalJsonParser(), DevicePluginParser()]

"""The pure per-line path of the kernel-log parser: one line in, its stamp and its event out.

``parse_prefix`` reads the stamp (every form in ``patterns.PREFIX_RE``), the syslog host and
tag, and returns the kernel message (``body``). ``misc.classify_body`` turns the message into
event rows, a quarantine reason, noise, or a ``Piece`` of a multi-line record (``assemble`` joins
those).
The vectorized path in ``vec`` does the same work over whole chunks; a test checks that
the two agree on every real file.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cache
from typing import Any

from faultlens.ingest.base import ParseContext, Quarantined, normalize_node, normalize_pci
from faultlens.ingest.catalog import packaged_catalog, recovery_action
from faultlens.ingest.kernel import patterns as kp
from faultlens.ingest.schema import Kind, Severity, Source
from faultlens.ingest.zones import to_utc, zone_of

_PREFIX = re.compile(kp.PREFIX_RE)
_HOST_TAG = re.compile(kp.HOST_TAG_RE)
_HOST_5424 = re.compile(kp.HOST_5424_RE)
_INNER_UP = re.compile(kp.INNER_UPTIME_RE)
_RE = {
    name: re.compile(getattr(kp, name))
    for name in (
        "XID_RE",
        "NVLINK_RE",
        "RECOVERY_RE",
        "GSP_RE",
        "XID_CH_RE",
        "XID_SM_RE",
        "SXID_RE",
        "SXID_DATA_RE",
        "SXID_SEV_RE",
        "DP_XID_RE",
        "DP_UNHEALTHY_RE",
        "BENIGN_NVRM_RE",
        "GPU_HEAD_RE",
        "GPU_CONT_RE",
        "PCI_ID_RE",
        "FALLEN_SINGLE_RE",
        "INIT_FAIL_RE",
        "INIT_CODE_RE",
        "GSP_LINE_RE",
        "GSP_HEARTBEAT_RE",
        "RM_WATCHDOG_RE",
        "GSP_TIMEOUT_BANNER_RE",
        "RESET_REQUIRED_RE",
        "APEI_RE",
        "APEI_KV_RE",
        "MCE_RE",
        "AMD_MCE_RE",
        "AMD_MCE_DETAIL_RE",
        "EDAC_RE",
        "EDAC_BENIGN_RE",
        "AER_RE",
        "IB_PORT_RE",
        "CARRIER_RE",
        "HUNG_RE",
        "RTC_RE",
    )
}
_INT = re.compile(r"[0-9]{1,18}")
MAX_GAP_LINES = 64  # a continuation line further than this from its record starts no record


@dataclass
class Prefix:
    """What a line's stamp and syslog header say, and the kernel message after them."""

    body: str
    ts: datetime | None = None
    uptime_s: float | None = None
    ts_flag: str | None = None
    node: str | None = None


@dataclass
class Piece:
    """One line of a multi-line record (``family`` gpu: fallen off the bus; apei: GHES)."""

    role: str  # head | cont
    family: str
    key: str | None
    text: str
    pre: Prefix
    line: int | None = None
    raw: str = ""


@dataclass
class Record:
    pieces: list[Piece] = field(default_factory=list)

    @property
    def last_line(self) -> int:
        return self.pieces[-1].line or 0


# -- stamps ----------------------------------------------------------------------------------------


def bsd_year(month: int, ctx: ParseContext, offset: int = 0) -> int | None:
    """Year of a year-less stamp: ``--year`` (plus Dec->Jan rollovers seen so far), else the
    file's mtime year, minus one for months later than the mtime's month (a December line in a
    file last written in January)."""
    if ctx.year is not None:
        return ctx.year + offset
    if ctx.mtime is not None:
        return ctx.mtime.year - (1 if month > ctx.mtime.month else 0)
    return None


def make_ts(
    year: int | None, month: int, day: int, hms: str, frac: str | None, tz: str | None
) -> datetime | None:
    if year is None:
        return None
    h, mi, s = (int(x) for x in hms.split(":"))
    try:
        ts = datetime(year, month, day, h, mi, s)
    except ValueError:
        return None
    if frac:
        ts += timedelta(microseconds=int(frac[:6].ljust(6, "0")))
    if tz and tz != "Z":
        t = tz[1:].replace(":", "")
        minutes = int(t[:2]) * 60 + int(t[2:])
        ts -= timedelta(minutes=minutes if tz[0] == "+" else -minutes)
    return ts


def parse_prefix(line: str, ctx: ParseContext, year_offset: int = 0) -> Prefix:
    m = _PREFIX.match(line)
    assert m is not None  # every part of the pattern is optional
    g = m.groupdict()
    ts: datetime | None = None
    up: float | None = float(g["up"]) if g["up"] else None
    if g["km_us"]:
        up = int(g["km_us"]) / 1e6
    if g["ct_mon"]:
        ts = make_ts(
            int(g["ct_year"]), kp.MONTH_NO[g["ct_mon"]], int(g["ct_day"]), g["ct_hms"], None, None
        )
    elif g["iso_date"]:
        y, mo, d = (int(x) for x in g["iso_date"].split("-"))
        ts = make_ts(y, mo, d, g["iso_hms"], g["iso_frac"], g["iso_tz"])
    elif g["bsd_mon"]:
        mo = kp.MONTH_NO[g["bsd_mon"]]
        ts = make_ts(
            bsd_year(mo, ctx, year_offset), mo, int(g["bsd_day"]), g["bsd_hms"], g["bsd_frac"], None
        )
    elif g["go_date"]:
        y, mo, d = (int(x) for x in g["go_date"].split("/"))
        ts = make_ts(y, mo, d, g["go_hms"], g["go_frac"], None)
    zone_flag = None
    if ts is not None and not (g["iso_date"] and g["iso_tz"]):
        ts, zone_flag = to_utc(ts, zone_of(ctx))  # a stamp with no zone: the site's (--tz)
    body = g["rest"]
    host = None
    iso_syslog = g["iso_date"] and g["iso_sep"] != "," and not g["fac"]
    # a priority before a dmesg stamp is ``dmesg -r`` / pstore (``<4>[ 12.3] msg``), not syslog
    raw_dmesg = g["up"] or g["ct_mon"] or g["km_us"]
    syslog = bool(g["bsd_mon"] or (g["pri"] and not raw_dmesg) or iso_syslog)
    if syslog:
        hm = (_HOST_5424 if g["v5424"] else _HOST_TAG).match(body)
        if hm:
            host, body = hm["host"], hm["body"]
        im = _INNER_UP.match(body)
        if im:
            up, body = float(im["up2"]), im["body2"]
    node = normalize_node(host) if host else ctx.node
    flag = None if ts is not None else ("boot_relative" if up is not None else zone_flag or "no_ts")
    if ts is not None and g["bsd_mon"] and ctx.year is None and ctx.mtime is not None:
        flag = "year_from_mtime"
    return Prefix(body=body, ts=ts, uptime_s=up, ts_flag=flag, node=node)


# -- events ----------------------------------------------------------------------------------------


@cache
def _catalog() -> tuple[dict[int, str], dict[int, str]]:
    cat = packaged_catalog()
    xids = cat["xid"].to_list()
    return (
        dict(zip(xids, cat["severity"].to_list(), strict=True)),
        dict(zip(xids, cat["typical_action"].to_list(), strict=True)),
    )


def catalog_severity(code: int | None) -> tuple[str, str | None]:
    """(severity, action) of an Xid code, as ``catalog.severity_action_expr`` gives them."""
    sev, act = _catalog()
    if code is None:
        return Severity.WARNING.value, None
    return sev.get(code, Severity.WARNING.value), act.get(code)


def attrs_json(attrs: dict[str, Any]) -> str | None:
    """Sorted keys, no nulls, compact; ``None`` when empty (the vectorized path writes the same)."""
    kept = {k: attrs[k] for k in sorted(attrs) if attrs[k] is not None}
    return json.dumps(kept, separators=(",", ":"), ensure_ascii=False) if kept else None


def event(
    pre: Prefix,
    ctx: ParseContext,
    kind: Kind,
    *,
    source: Source = Source.KERNEL,
    message: str | None = None,
    **fields: Any,
) -> dict[str, Any]:
    attrs = fields.pop("attrs", {})
    return {
        "ts": pre.ts,
        "uptime_s": pre.uptime_s,
        "ts_flag": pre.ts_flag,
        "node": pre.node,
        "gpu": fields.get("gpu"),
        "source": source.value,
        "kind": kind.value,
        "subkind": fields.get("subkind"),
        "code": fields.get("code"),
        "severity": fields.get("severity"),
        "action": fields.get("action"),
        "pid": fields.get("pid"),
        "process": fields.get("process"),
        "message": pre.body if message is None else message,
        "attrs": attrs_json(attrs),
        "file": ctx.file,
        "line": None,
    }


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and _INT.fullmatch(text) else None


def xid_event(pre: Prefix, ctx: ParseContext) -> dict[str, Any] | Quarantined:
    m = _RE["XID_RE"].search(pre.body)
    if not m:
        return Quarantined("NVRM Xid line with unknown shape")
    code = int(m["code"])
    msg = m["msg"]
    attrs: dict[str, Any] = {}
    subkind = None
    for name in ("XID_CH_RE", "XID_SM_RE", "GSP_RE"):
        sm = _RE[name].search(msg)
        if sm:
            attrs.update(sm.groupdict())
    nm = _RE["NVLINK_RE"].match(msg)
    if nm:
        attrs.update(nm.groupdict())
        attrs["words"] = nm["words"].split()
        subkind = nm["sev"]
        del attrs["sev"]
    for k in ("gpc", "tpc", "sm", "after_s", "rm_gpu", "fn", "link"):
        if attrs.get(k) is not None:
            attrs[k] = int(attrs[k])
    kind = (
        Kind.NVLINK
        if code in kp.NVLINK_CODES
        else Kind.GSP_TIMEOUT
        if code == kp.GSP_TIMEOUT_CODE
        else Kind.XID
    )
    sev, act = catalog_severity(code)
    rm = _RE["RECOVERY_RE"].search(msg) if code == kp.RECOVERY_CODE else None
    if rm:
        to_name = rm["to_name"] or rm["to_bare"]
        attrs["recovery"] = " ".join(to_name.split()) if to_name else rm["to_code"]
        sev, act = recovery_action(to_name, rm["to_code"]) or (sev, act)
    proc = m["proc"]
    return event(
        pre,
        ctx,
        kind,
        gpu=normalize_pci(m["pci"]),
        code=code,
        subkind=subkind,
        severity=sev,
        action=act,
        pid=_int(m["pid"]),
        process=None if proc in (None, "", "<unknown>") else proc,
        attrs=attrs,
    )


SXID_SEVERITY = {
    "Fatal": ("critical", "reset_gpu"),
    "Non-fatal": ("warning", "none"),
    "Nonfatal": ("warning", "none"),
}
# an untagged detail line on its own (the chunk path gives it its tagged line's severity)
SXID_DETAIL_SEVERITY = "warning"


def sxid_event(pre: Prefix, ctx: ParseContext) -> dict[str, Any] | Quarantined:
    m = _RE["SXID_RE"].search(pre.body)
    if not m:
        return Quarantined("NVSwitch SXid line with unknown shape")
    dm = _RE["SXID_DATA_RE"].search(m["msg"])
    sm = _RE["SXID_SEV_RE"].search(m["msg"])
    sub = sm["sev"] if sm else None
    sev, act = SXID_SEVERITY.get(sub or "", (SXID_DETAIL_SEVERITY, None))
    attrs = {"switch": _int(m["switch"]), "data": dm["data"].split(", ") if dm else None}
    return event(
        pre,
        ctx,
        Kind.SXID,
        gpu=normalize_pci(m["pci"]),
        code=int(m["code"]),
        subkind=sub,
        severity=sev,
        action=act,
        attrs=attrs,
    )


def dp_event(pre: Prefix, ctx: ParseContext, route: str) -> dict[str, Any] | Quarantined:
    if route == "dp_xid":
        m = _RE["DP_XID_RE"].search(pre.body)
        if not m:
            return Quarantined("device-plugin Xid line with unknown shape")
        code = int(m["code"])
        sev, act = catalog_severity(code)
        return event(
            pre,
            ctx,
            Kind.DEVICE_UNHEALTHY,
            source=Source.K8S,
            gpu=m["dev"],
            code=code,
            subkind="xid_critical",
            severity=sev,
            action=act,
        )
    m = _RE["DP_UNHEALTHY_RE"].search(pre.body)
    if not m:
        return Quarantined("device-plugin unhealthy line with unknown shape")
    return event(
        pre,
        ctx,
        Kind.DEVICE_UNHEALTHY,
        source=Source.K8S,
        gpu=m["dev"],
        subkind="marked_unhealthy",
        severity=Severity.ERROR.value,
    )


def route_of(body: str) -> str:
    """Which extractor a candidate message goes to (the vectorized path computes the same)."""
    if "NVRM: Xid" in body:
        return "xid"
    if "SXid (" in body:
        return "sxid"
    if "XidCriticalError" in body:
        return "dp_xid"
    if "device marked unhealthy" in body:
        return "dp_unhealthy"
    if "[Hardware Error]" in body:
        return "hw"
    if "NVRM:" in body:  # the driver's tag; "grep NVRM" in a pasted command is not one
        return "benign" if _RE["BENIGN_NVRM_RE"].search(body) else "nvrm"
    return "other"


Outcome = dict[str, Any] | Quarantined | Piece | None


def is_candidate(line: str) -> bool:
    return any(lit in line for lit in kp.LITERALS)

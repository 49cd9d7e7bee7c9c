"""The rarer kernel messages, one at a time: NVRM init/GSP failures, ``[Hardware Error]`` (MCE),
the multi-line records (NVRM "fallen off the bus", APEI/GHES hardware-error blocks), and the
per-line path of the ``families`` table (EDAC, AER, InfiniBand, storage, thermal, panics;
the chunk path reads that table over whole frames).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from faultlens.ingest.base import ParseContext, Quarantined, normalize_pci
from faultlens.ingest.kernel import patterns as kp
from faultlens.ingest.kernel.families import (
    QUARANTINE_LITERALS,
    UNKNOWN_SHAPE,
    family_event,
    match_family,
)
from faultlens.ingest.kernel.line import (
    _RE,
    MAX_GAP_LINES,
    Outcome,
    Piece,
    Prefix,
    Record,
    _int,
    catalog_severity,
    dp_event,
    event,
    route_of,
    sxid_event,
    xid_event,
)
from faultlens.ingest.schema import Kind

NO_HEAD = "continuation line without its first line"


def classify_hw(pre: Prefix, ctx: ParseContext) -> Outcome:
    m = _RE["APEI_RE"].match(pre.body)
    if m:
        role = "head" if m["text"].startswith(kp.APEI_HEAD) else "cont"
        return Piece(role, "apei", m["rec"], m["text"], pre)
    mm = _RE["MCE_RE"].search(pre.body)
    if mm:
        if mm["logged"]:
            return event(pre, ctx, Kind.MCE, subkind="logged", severity="warning")
        attrs = {"cpu": _int(mm["cpu"]), "bank": _int(mm["bank"]), "status": mm["status"]}
        return event(
            pre,
            ctx,
            Kind.MCE,
            subkind="exception" if mm["exc"] else "machine_check",
            severity="critical" if mm["exc"] else "error",
            attrs=attrs,
        )
    if "mce: [Hardware Error]:" in pre.body:
        return None  # register dump lines (TSC, ADDR, PROCESSOR) around a reported check
    m = _RE["AMD_MCE_RE"].search(pre.body)
    if m:
        return event(
            pre,
            ctx,
            Kind.MEMORY,
            subkind="amd_mce_ecc",
            severity="warning",
            attrs={"bank": _int(m["bank"]), "node_id": _int(m["node_id"]), "what": m["what"]},
        )
    if _RE["AMD_MCE_DETAIL_RE"].search(pre.body):
        return None  # the decoder's detail lines under its head line
    return Quarantined("hardware error line with unknown shape")


def classify_nvrm(pre: Prefix, ctx: ParseContext) -> Outcome:
    body = pre.body
    m = _RE["GPU_HEAD_RE"].search(body)
    if m:
        return Piece("head", "gpu", None, body[m.start() :], pre)
    m = _RE["GPU_CONT_RE"].match(body)
    if m:
        return Piece("cont", "gpu", None, m["text"], pre)
    m = _RE["FALLEN_SINGLE_RE"].search(body)
    if m:
        sev, act = catalog_severity(kp.FALLEN_OFF_CODE)
        return event(
            pre, ctx, Kind.FALLEN_OFF_BUS, gpu=normalize_pci(m["pci"]), severity=sev, action=act
        )
    m = _RE["INIT_FAIL_RE"].search(body)
    if m:
        cm = _RE["INIT_CODE_RE"].search(m["detail"])
        return event(
            pre,
            ctx,
            Kind.GPU_INIT_FAIL,
            gpu=normalize_pci(m["pci"]),
            subkind=_init_subkind(m["what"]),
            severity="error",
            action="reset_gpu",
            attrs={"init_code": cm["init_code"] if cm else None},
        )
    if _RE["RESET_REQUIRED_RE"].search(body):
        return event(pre, ctx, Kind.RESET_REQUIRED, severity="error", action="reset_gpu")
    m = _RE["GSP_LINE_RE"].search(body)
    if m:
        return event(
            pre,
            ctx,
            Kind.GSP_TIMEOUT,
            gpu=normalize_pci(m["pci"]),
            subkind="rate_limited" if m["pci"] else "timeout",
            severity="error",
            action="reset_gpu",
        )
    for name, subkind in (
        ("GSP_HEARTBEAT_RE", "heartbeat"),
        ("RM_WATCHDOG_RE", "rc_watchdog"),
        ("GSP_TIMEOUT_BANNER_RE", "rpc_timeout_dump"),
    ):
        m = _RE[name].search(body)
        if m:
            return event(
                pre,
                ctx,
                Kind.GSP_TIMEOUT,
                subkind=subkind,
                severity="error",
                action="reset_gpu",
                attrs={"function": m["fnname"]},
            )
    return Quarantined("NVRM line with unknown shape")


def _init_subkind(what: str) -> str:
    if "probe routine" in what:
        return "probe_failed"
    if what.startswith("No NVIDIA"):
        return "no_devices"
    return "rm_init_adapter"


def classify_other(pre: Prefix, ctx: ParseContext) -> Outcome:
    """A message without NVRM or ``[Hardware Error]``: the first matching family of
    ``families.FAMILIES`` (the vectorized path reads the same table)."""
    body = pre.body
    hit = match_family(body)
    if hit is not None:
        fam, m = hit
        if fam.custom:
            return CUSTOM[fam.custom](pre, ctx, m)
        return family_event(fam, m, pre, ctx)
    if any(lit in body for lit in QUARANTINE_LITERALS):
        return Quarantined(UNKNOWN_SHAPE)
    return None  # weak literal (mlx5, EDAC, AER, carrier chatter) without an error shape


def _edac_event(pre: Prefix, ctx: ParseContext, m: re.Match[str]) -> dict[str, Any]:
    ue = m["type"] == "UE"
    attrs: dict[str, Any] = {
        "mc": m["mc"],
        "count": _int(m["count"]),
        "location": m["loc"],
        "error": m["what"],
    }
    for k, v in re.findall(r"([a-z_]+):([0-9a-fA-Fx]+)", m["detail"] or ""):
        attrs.setdefault(k, v)
    return event(
        pre,
        ctx,
        Kind.MEMORY,
        subkind=m["type"],
        severity="critical" if ue else "warning",
        action="drain_node" if ue else "none",
        attrs=attrs,
    )


def _aer_event(pre: Prefix, ctx: ParseContext, m: re.Match[str]) -> dict[str, Any]:
    sev_text = (m["sev"] or m["sev2"] or "").strip(" \t")
    low = sev_text.lower()
    if "fatal" in low and "non-fatal" not in low:
        sev, act = "critical", "reboot_node"
    elif "uncorrect" in low or "non-fatal" in low:
        sev, act = "error", "reset_gpu"
    else:
        sev, act = "info", "none"
    src = normalize_pci(m["src"]) if m["src"] else None
    return event(
        pre,
        ctx,
        Kind.PCIE,
        gpu=src or normalize_pci(m["pci"]),
        subkind=sev_text,
        severity=sev,
        action=act,
        attrs={"reporter": normalize_pci(m["pci"]), "type": m["type"], "agent": m["agent"]},
    )


# -- boot time -------------------------------------------------------------------------------------


CUSTOM = {"edac": _edac_event, "aer": _aer_event}


def rtc_boot_time(pre: Prefix) -> datetime | None:
    """Boot time from ``rtc_cmos ...: setting system clock to <UTC>`` plus the line's uptime."""
    if pre.uptime_s is None:
        return None
    m = _RE["RTC_RE"].search(pre.body)
    if not m:
        return None
    try:
        wall = datetime.fromisoformat(f"{m['date']}T{m['hms']}")
    except ValueError:
        return None
    return wall - timedelta(microseconds=round(pre.uptime_s * 1e6))


# -- multi-line records ----------------------------------------------------------------------------


def finish_record(rec: Record, ctx: ParseContext) -> tuple[list[dict[str, Any]], list[Any]]:
    """A complete record -> ([event], []) or ([], [(line, raw, reason)...])."""
    head = rec.pieces[0]
    lines = [p.line for p in rec.pieces]
    if head.family == "gpu":
        text = " ".join(p.text.strip(" \t") for p in rec.pieces)
        m = _RE["GPU_HEAD_RE"].search(text)
        pm = _RE["PCI_ID_RE"].search(text)
        attrs = {"pci_id": pm["pci_id"] if pm else None, "lines": len(lines)}
        gpu = normalize_pci(m["pci"]) if m else None
        if "fallen off the bus" in text:
            sev, act = catalog_severity(kp.FALLEN_OFF_CODE)
            ev = event(
                head.pre,
                ctx,
                Kind.FALLEN_OFF_BUS,
                gpu=gpu,
                severity=sev,
                action=act,
                message=text,
                attrs=attrs,
            )
        elif "not supported" in text:
            ev = event(
                head.pre,
                ctx,
                Kind.GPU_INIT_FAIL,
                gpu=gpu,
                subkind="unsupported",
                severity="error",
                action="none",
                message=text,
                attrs=attrs,
            )
        else:
            return [], [(p.line, p.raw, "incomplete multi-line NVRM record") for p in rec.pieces]
    else:
        ev = _apei_event(rec, ctx)
    ev["line"] = head.line
    return [ev], []


def _apei_event(rec: Record, ctx: ParseContext) -> dict[str, Any]:
    head = rec.pieces[0]
    kv: dict[str, str] = {}
    for p in rec.pieces[1:]:
        m = _RE["APEI_KV_RE"].match(p.text)
        if m:
            kv.setdefault(m["key"].strip(" ").replace(" ", "_"), m["value"].strip(" \t"))
    section = kv.get("section_type", "")
    level = kv.get("event_severity")
    kind = (
        Kind.PCIE if "PCIe" in section else Kind.MEMORY if "memory" in section.lower() else Kind.MCE
    )
    sev = {"fatal": "critical", "recoverable": "error", "corrected": "warning"}.get(
        level or "", "warning"
    )
    gpu = normalize_pci(kv.get("device_id")) if kind == Kind.PCIE else None
    attrs: dict[str, Any] = {k: v for k, v in kv.items() if k != "event_severity"}
    attrs.update({"record": head.key, "lines": len(rec.pieces)})
    return event(
        head.pre,
        ctx,
        kind,
        gpu=gpu,
        subkind=level,
        severity=sev,
        message=head.pre.body,
        attrs=attrs,
    )


def assemble(
    pieces: list[Piece], open_recs: dict[str, Record], ctx: ParseContext, end_line: int | None
) -> tuple[list[dict[str, Any]], list[Any], list[int]]:
    """Join pieces (in line order) into records. ``open_recs`` carries unfinished records across
    chunks; records idle for more than ``MAX_GAP_LINES`` before ``end_line`` are closed (all, when
    ``end_line`` is None). Returns (events, quarantined (line, raw, reason), parsed lines)."""
    events: list[dict[str, Any]] = []
    quarantined: list[Any] = []
    parsed: list[int] = []

    def close(fam: str) -> None:
        rec = open_recs.pop(fam)
        ev, q = finish_record(rec, ctx)
        events.extend(ev)
        quarantined.extend(q)
        if ev:
            parsed.extend(p.line for p in rec.pieces if p.line is not None)

    for p in pieces:
        cur = open_recs.get(p.family)
        if p.role == "head":
            if cur is not None:
                close(p.family)
            open_recs[p.family] = Record([p])
        elif (
            cur is not None
            and cur.pieces[0].key == p.key
            and ((p.line or 0) - cur.last_line <= MAX_GAP_LINES)
        ):
            cur.pieces.append(p)
        else:
            quarantined.append((p.line, p.raw, NO_HEAD))
    for fam in list(open_recs):
        if end_line is None or open_recs[fam].last_line < end_line - MAX_GAP_LINES:
            close(fam)
    return events, quarantined, parsed


def classify_body(pre: Prefix, ctx: ParseContext) -> Outcome:
    route = route_of(pre.body)
    if route == "xid":
        return xid_event(pre, ctx)
    if route == "sxid":
        return sxid_event(pre, ctx)
    if route in ("dp_xid", "dp_unhealthy"):
        return dp_event(pre, ctx, route)
    if route == "benign":
        return None
    if route == "hw":
        return classify_hw(pre, ctx)
    if route == "nvrm":
        return classify_nvrm(pre, ctx)
    return classify_other(pre, ctx)

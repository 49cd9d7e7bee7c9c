"""PyTorch distributed lines: ProcessGroupNCCL watchdog, DistBackendError, torchrun failures.

These lines sit in the same stderr as NCCL's own output, so they are extracted by the ``nccl``
parser (``parser``), which calls ``handle_line`` here for every candidate line that is not a
``host:pid:tid [dev] NCCL ...`` line. The shapes, one per line unless noted:

- Launcher prefixes, stripped first: Ray ``(Actor pid=12, ip=10.0.0.1) ``, torchrun
  ``[rank3]:`` / ``[default3]:``, pdsh ``host: ``, a leading ``[12345] `` line counter.
- glog stamps ``[E1206 18:44:12.715298746 ProcessGroupNCCL.cpp:607]`` (month not zero-padded:
  ``E321`` is March 21; the year comes from ``ParseContext.year``, else the file's mtime); the
  old form ``[E ProcessGroupNCCL.cpp:458]`` has no time.
- Watchdog timeouts, old and new::

    [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7753,
    OpType=_REDUCE_SCATTER_BASE, NumelIn=544997376, NumelOut=68124672, Timeout(ms)=600000)
    ran for 600061 milliseconds before timing out.

  -> ``nccl_timeout`` (subkind ``watchdog``; ``rethrown`` when the same text is repeated inside
  ``watchdog thread terminated with exception:`` or ``what():``).
- ``Exception (either an error or timeout) detected by watchdog at work: N, last enqueued NCCL
  work: M, last completed NCCL work: K.`` -> ``nccl_error`` / ``watchdog_exception``.
- ``DistBackendError: NCCL error in: FILE:LINE, <reason>, NCCL version X`` (also
  ``RuntimeError: NCCL error in: ...``), optionally followed by ``ncclRemoteError: ...``,
  ``Last error:`` and one detail line, folded into one ``nccl_error`` event. The block's lines
  may have up to ``BLOCK_GAP`` lines of other families or other processes between them: a line
  goes on the block if it is the next line, or of the block's process (its launcher prefix,
  ``block_key``); a line of that process that goes on with something else ends it, and so does
  its next block's start (another process's sets it aside: several processes' blocks may be
  interleaved line by line). The detail is the line after ``Last error:`` of the same process.
- torchrun's ``ChildFailedError`` report: one ``process_failed`` event per ``[N]:`` entry of its
  ``Failures:`` / ``Root Cause (first observed failure):`` tables (time, host, rank, exitcode).
- The rest of the watchdog family (failure detected, thread terminated with an exception, watchdog
  or heartbeat monitor stuck, flight-recorder notices) and elastic worker failures with exit codes
  and signals: shapes in ``watchdog``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from faultlens.ingest.base import ParseContext, normalize_node
from faultlens.ingest.nccl import watchdog
from faultlens.ingest.schema import Kind, Severity, Source
from faultlens.ingest.zones import to_utc, zone_of

MESSAGE_CHARS = 2000
WS = " \t\r\n\x0b\x0c"  # what ``strip`` removes, the same in Python and polars

# NCCL result codes (nccl.h ncclResult_t), for "retcode 6" / "res=3" / "-> 6".
NCCL_RESULTS = {
    1: "ncclUnhandledCudaError",
    2: "ncclSystemError",
    3: "ncclInternalError",
    4: "ncclInvalidArgument",
    5: "ncclInvalidUsage",
    6: "ncclRemoteError",
}
NCCL_RESULT_NAMES = tuple(NCCL_RESULTS.values())

# Literals that make a line a candidate for the PyTorch extractors. Few and with rare first bytes,
# so that the one alternation regex over every line stays on the SIMD literal fast path.
LITERALS = (
    "atchdog",  # Watchdog caught ..., detected by watchdog
    "ProcessGroupNCCL",
    "NCCL error",
    "Error",  # DistBackendError, ncclRemoteError, ChildFailedError, RuntimeError
    "Last error:",
    "Root Cause",
    "time      :",
    "host      :",
    "local_rank:",
    "exitcode  :",
    "error_file:",
    "traceback :",
    "Heartbeat monitor",  # ProcessGroupNCCL's heartbeat monitor timed out
    "light recorder",  # flight-recorder notices
    "lightRecorder",
    "(exitcode: ",  # torch.distributed.elastic: failed (exitcode: -9) local_rank: ...
    "SignalException",
)

RAY_PREFIX = re.compile(
    r"^\((?P<actor>[^()]*?)\bpid=(?P<pid>[0-9]+)(?:, ip=(?P<ip>[0-9a-fA-F.:]+))?[^()]*\) ?"
)
_LAUNCHER_PARTS = (
    ("counter", re.compile(r"^\[[0-9]+\] ")),
    ("ray", RAY_PREFIX),
    ("rank", re.compile(r"^\[(?:rank|default)(?P<rank>[0-9]+)\]: ?")),
    ("pdsh", re.compile(r"^(?P<host>[A-Za-z0-9][A-Za-z0-9._-]*): ")),
)
_CAMEL = re.compile(r"[a-z][A-Z]")
_NOT_HOSTS = frozenset(
    {"info", "warning", "warn", "error", "debug", "critical", "fatal", "note", "traceback"}
)
ISO_TS = re.compile(
    r"\[?(?P<date>[0-9]{4}-[0-9]{2}-[0-9]{2})[T _](?P<time>[0-9]{2}:[0-9]{2}:[0-9]{2})"
    r"(?:[.,](?P<frac>[0-9]+))?(?P<tz>Z|[+-][0-9]{2}:?[0-9]{2})?\]?"
)
GLOG = re.compile(
    r"\[?(?P<sev>[EWIF])(?:(?P<md>[0-9]{3,4}) (?P<hms>[0-9]{2}:[0-9]{2}:[0-9]{2})(?:\.(?P<frac>"
    r"[0-9]+))?)?(?: +[0-9]+)? ?(?P<src>[A-Za-z0-9_.]+\.(?:cpp|cc|hpp|h|py)):(?P<srcline>[0-9]+)\]"
)
PG_RANK = re.compile(r"\[(?:PG [^\]]*?)?Rank (?P<rank>[0-9]+)\]")
WATCHDOG = re.compile(
    r"Watchdog caught collective operation timeout: WorkNCCL\((?:SeqNum=(?P<seq_num>[0-9]+), )?"
    r"OpType=(?P<op_type>[A-Za-z0-9_]+)(?:, NumelIn=(?P<numel_in>-?[0-9]+), "
    r"NumelOut=(?P<numel_out>-?[0-9]+))?(?:, TensorShape=\[[^\]]*\])?, "
    r"Timeout\(ms\)=(?P<timeout_ms>[0-9]+)\) ran for (?P<ran_for_ms>[0-9]+) milliseconds"
)
# A timeout report cut inside its WorkNCCL(...) (a console wrapped or truncated the line): what is
# left must be the start of ``Key=value, Key=value`` fields; the event keeps it, flagged
# ``truncated``. A garbled report (fields not so separated) is still quarantined.
WATCHDOG_CUT = re.compile(
    r"Watchdog caught collective operation timeout:? ?(?:WorkNCCL\((?P<fields>(?:[A-Za-z()]+="
    r"[^, ]*, )*[A-Za-z()]*(?:=[^, ]*)?))?\s*$"
)
_SEQ_NUM = re.compile(r"SeqNum=([0-9]+)")
# PyTorch 2.4+ "detected by watchdog at work: N, ..."; 2.3 said "Timeout at NCCL work: N, ...".
DETECTED = re.compile(
    r"(?:detected by watchdog at work|Timeout at NCCL work): (?P<seq_num>-?[0-9]+), "
    r"last enqueued NCCL work: "
    r"(?P<last_enqueued>-?[0-9]+), last completed NCCL work: (?P<last_completed>-?[0-9]+)"
)
NCCL_ERROR_IN = re.compile(
    r"(?P<exc>[A-Za-z_.]*(?:DistBackendError|RuntimeError|Error|Exception))?:? ?"
    r"NCCL error(?: in: (?P<where>[^,]+))?[,:] (?P<reason>.*?)(?:, NCCL version (?P<version>"
    r"[0-9][0-9.]*[^\s,]*))?\s*$"
)
RESULT_LINE = re.compile(r"^(?P<name>nccl[A-Za-z]+Error): ?(?P<text>.*)$")
FAIL_FIELD = re.compile(
    r"^\s+(?P<key>time|host|rank|exitcode|error_file|traceback)\s*: ?(?P<value>.*)$"
)
_REASONS = (
    ("unhandled cuda error", "ncclUnhandledCudaError"),
    ("unhandled system error", "ncclSystemError"),
    ("internal error", "ncclInternalError"),
    ("invalid usage", "ncclInvalidUsage"),
    ("invalid argument", "ncclInvalidArgument"),
    ("remote process exited", "ncclRemoteError"),
    ("network error", "ncclRemoteError"),
)
# Follow-up lines of a watchdog failure that add nothing the timeout event lacks.
_KNOWN_NOISE = (
    "Some NCCL operations have failed or timed out",
    "To avoid data inconsistency",
)


@dataclass
class Prefix:
    """What a launcher prefix and a leading timestamp said about a line."""

    rest: str
    host: str | None = None
    rank: int | None = None
    ray_pid: int | None = None
    ray_ip: str | None = None
    actor: str | None = None


@dataclass
class TorchState:
    pending: dict[str, Any] | None = None  # a DistBackendError event awaiting continuation lines
    pending_last: int = 0  # line number of the last line folded into ``pending``
    pending_key: tuple[Any, ...] = ()  # the launcher prefix of the pending block (``block_key``)
    expect_detail: int = 0  # the "Last error:" line whose detail (its process's next line) is due
    # other processes' open blocks (their lines interleaved with the pending one's): key ->
    # (event, last line, expect_detail)
    parked: dict[tuple[Any, ...], tuple[dict[str, Any], int, int]] = field(default_factory=dict)
    failure: dict[str, Any] | None = None  # the ChildFailedError entry being read
    in_failure_report: bool = False
    root_cause: bool = False


@dataclass
class Sink:
    """Rows produced while handling candidate lines."""

    events: list[dict[str, Any]] = field(default_factory=list)
    link_health: list[dict[str, Any]] = field(default_factory=list)
    quarantine: list[tuple[int, str, str]] = field(default_factory=list)


def strip_launcher(line: str) -> Prefix:
    """Remove launcher prefixes (pdsh host, Ray actor, torchrun rank, line counter) in any order."""
    p = Prefix(rest=line)
    if line[:1] not in ("[", "(") and ": " not in line[:64]:
        return p  # the common case: nothing to strip
    for _ in range(4):
        first = p.rest[:1]
        for name, rx in _LAUNCHER_PARTS:
            # each pattern's first character, tested before the pattern (the same outcome)
            if name == "pdsh":
                if p.host or not (first.isascii() and first.isalnum()):
                    continue
            elif first != ("(" if name == "ray" else "["):
                continue
            m = rx.match(p.rest)
            if not m:
                continue
            if name == "pdsh":
                host = m["host"]
                if host.isdigit():
                    pass  # ``srun --label``'s task number ("0: "): stripped, never a host
                elif (
                    _CAMEL.search(host)
                    or host.lower() in _NOT_HOSTS
                    or host.startswith("torch.")  # a logger's name: torch.distributed.elastic...
                    or p.host
                ):
                    continue
                else:
                    p.host = normalize_node(host)
            elif name == "ray":
                p.ray_pid, p.ray_ip = int(m["pid"]), m["ip"]
                p.actor = m["actor"].strip(" ,") or None
            elif name == "rank":
                p.rank = int(m["rank"])
            p.rest = p.rest[m.end() :]
            break
        else:
            break
    return p


def iso_ts(text: str, zone: str | None = None) -> datetime | None:
    """The first ``YYYY-MM-DD[ T]HH:MM:SS[.f][Z|+hh:mm]`` stamp in ``text``, as naive UTC (see
    ``iso_stamp``)."""
    return iso_stamp(text, zone)[0]


def iso_stamp(text: str, zone: str | None = None) -> tuple[datetime | None, str | None]:
    """(naive UTC, flag) of the first ISO stamp in ``text``: exact with an offset or ``Z``; the
    wall clock of ``zone`` (``--tz``; UTC without it) otherwise, flagged where that has no single
    answer (``zones.to_utc``)."""
    m = ISO_TS.search(text)
    if not m:
        return None, None
    try:
        ts = datetime.fromisoformat(f"{m['date']}T{m['time']}")
    except ValueError:
        return None, None
    if m["frac"]:
        ts = ts.replace(microsecond=int(m["frac"][:6].ljust(6, "0")))
    tz = m["tz"]
    if not tz:
        return to_utc(ts, zone)
    if tz != "Z":
        sign = 1 if tz[0] == "+" else -1
        digits = tz[1:].replace(":", "")
        ts -= sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
    return ts, None


def glog_ts(
    md: str | None, hms: str | None, frac: str | None, ctx: ParseContext
) -> datetime | None:
    """A glog ``MMDD HH:MM:SS.f`` stamp as naive UTC (see ``glog_stamp``)."""
    return glog_stamp(md, hms, frac, ctx)[0]


def glog_stamp(
    md: str | None, hms: str | None, frac: str | None, ctx: ParseContext
) -> tuple[datetime | None, str | None]:
    """(naive UTC, flag) of a glog ``MMDD HH:MM:SS.f`` stamp: the year from ``ctx.year``, else
    the file's mtime; the process's wall clock, of the site's zone (``--tz``; UTC without it)."""
    if not md or not hms:
        return None, None
    year = ctx.year or (ctx.mtime.year if ctx.mtime else None)
    if year is None:
        return None, None
    try:
        month, day = int(md[:-2]), int(md[-2:])
        h, mi, s = (int(x) for x in hms.split(":"))
        ts = datetime(year, month, day, h, mi, s, int((frac or "0")[:6].ljust(6, "0")))
    except ValueError:
        return None, None
    if ctx.year is None and ctx.mtime is not None and ts > ctx.mtime + timedelta(days=1):
        try:
            ts = ts.replace(year=year - 1)  # a December stamp in a file written in January
        except ValueError:  # February 29
            return None, None
    return to_utc(ts, zone_of(ctx))


def attrs_json(attrs: dict[str, Any]) -> str:
    """Compact JSON, keys sorted, nulls dropped: the same text polars' vectorized path writes."""
    return json.dumps(
        {k: attrs[k] for k in sorted(attrs) if attrs[k] is not None},
        separators=(",", ":"),
        ensure_ascii=False,
    )


def _emit(sink: Sink, ctx: ParseContext, line_no: int, **fields: Any) -> None:
    """One PyTorch event of line ``line_no`` into the sink (``make_event``'s fields)."""
    sink.events.append(make_event(ctx, line_no, source=Source.PYTORCH, **fields))


def make_event(
    ctx: ParseContext,
    line_no: int,
    *,
    source: Source,
    kind: Kind,
    subkind: str | None,
    severity: Severity,
    message: str,
    node: str | None,
    ts: datetime | None = None,
    ts_flag: str | None = None,
    pid: int | None = None,
    gpu: str | None = None,
    gpu_index: int | None = None,
    attrs: dict[str, Any] | None = None,
    job_id: str | None = None,
) -> dict[str, Any]:
    """An event row; ``ts_flag``: why a stamp gave no time (``tz_ambiguous``), else ``no_ts``."""
    return {
        "ts": ts,
        "ts_flag": None if ts is not None else ts_flag or "no_ts",
        "node": node or ctx.node,
        "gpu": gpu,
        "gpu_index": gpu_index,
        "source": source.value,
        "kind": kind.value,
        "subkind": subkind,
        "severity": severity.value,
        "job_id": job_id,
        "pid": pid,
        "message": message.strip(WS)[:MESSAGE_CHARS],
        "attrs": attrs_json(attrs) if attrs else "{}",
        "file": ctx.file,
        "line": line_no,
    }


def _int(text: str | None) -> int | None:
    return int(text) if text not in (None, "") else None


def reason_subkind(reason: str) -> str | None:
    low = reason.lower()
    for needle, name in _REASONS:
        if needle in low:
            return name
    for name in NCCL_RESULT_NAMES:
        if name in reason:
            return name
    return None


# -- the handler ----------------------------------------------------------------------------------


def handle_line(
    line_no: int,
    raw: str,
    st: TorchState,
    ctx: ParseContext,
    sink: Sink,
    job_id: str | None,
    pre: Prefix | None = None,
) -> bool:
    """Extract one candidate line that is not a NCCL-format line. True if it became (part of) rows.

    ``pre`` is ``strip_launcher(raw)`` when the caller has it already. Lines that look like a
    watchdog report but do not parse are quarantined (added to ``sink``).
    """
    pre = pre or strip_launcher(raw)
    text = pre.rest
    key = block_key(pre)
    if st.parked:
        _unpark(line_no, key, st, sink)
    if st.pending is not None:
        near = line_no - st.pending_last <= BLOCK_GAP
        same = key == st.pending_key
        # the block's next line, or its process's next line behind other processes' lines
        if near and (same or line_no == st.pending_last + 1) and _continue(line_no, text, st, same):
            return True
        if same or not near:  # another process's line within the gap leaves the block open
            flush_pending(st, sink)
    if _failure_line(line_no, text, pre, st, ctx, sink, job_id):
        return True
    glog = GLOG.search(text)
    ts, flag = None, None
    if glog:
        ts, flag = glog_stamp(glog["md"], glog["hms"], glog["frac"], ctx)
    if ts is None and flag is None:
        ts, flag = iso_stamp(text[: glog.start()] if glog else text[:40], zone_of(ctx))
    pg = PG_RANK.search(text)
    rank = int(pg["rank"]) if pg else pre.rank
    base = {"rank": rank, "launcher_pid": pre.ray_pid, "ip": pre.ray_ip, "actor": pre.actor}
    common = {"ts": ts, "ts_flag": flag, "node": pre.host, "job_id": job_id, "pid": pre.ray_pid}
    if "Watchdog caught" in text:
        return _watchdog(line_no, raw, text, ctx, sink, base, common)
    if _watchdog_family(line_no, text, glog, ctx, sink, base, common):
        return True
    if _elastic(line_no, text, ctx, sink, base, common):
        return True
    m = DETECTED.search(text)
    if m:
        attrs = {**base, **{k: _int(v) for k, v in m.groupdict().items()}}
        _emit(
            sink,
            ctx,
            line_no,
            kind=Kind.NCCL_ERROR,
            subkind="watchdog_exception",
            severity=Severity.ERROR,
            message=text[glog.end() :] if glog else text,
            attrs=attrs,
            **common,
        )
        return True
    if "NCCL error" in text and _nccl_error_in(line_no, text, st, ctx, sink, base, common, key):
        return True
    m = RESULT_LINE.match(text)
    if m:
        _emit(
            sink,
            ctx,
            line_no,
            kind=Kind.NCCL_ERROR,
            subkind=m["name"],
            severity=Severity.ERROR,
            message=text,
            attrs=base,
            **common,
        )
        return True
    if "ProcessGroupNCCL" in text and glog and glog["sev"] in "EF":
        if any(n in text for n in _KNOWN_NOISE):
            return False
        if "watchdog" in text.lower() or "timeout" in text.lower():
            sink.quarantine.append((line_no, raw, "unrecognized ProcessGroupNCCL watchdog line"))
            return False
        _emit(
            sink,
            ctx,
            line_no,
            kind=Kind.NCCL_ERROR,
            subkind="process_group",
            severity=Severity.ERROR,
            message=text[glog.end() :],
            attrs=base,
            **common,
        )
        return True
    if "DistBackendError" in text and ":" in text:
        _emit(
            sink,
            ctx,
            line_no,
            kind=Kind.NCCL_ERROR,
            subkind="dist_backend",
            severity=Severity.ERROR,
            message=text,
            attrs=base,
            **common,
        )
        return True
    return False


def _watchdog_family(
    line_no: int,
    text: str,
    glog: re.Match[str] | None,
    ctx: ParseContext,
    sink: Sink,
    base: dict[str, Any],
    common: dict[str, Any],
) -> bool:
    """The watchdog's other reports (``watchdog.watchdog_report``) as one event."""
    found = watchdog.watchdog_report(text)
    if found is None:
        return False
    kind, subkind, severity, attrs = found
    _emit(
        sink,
        ctx,
        line_no,
        kind=kind,
        subkind=subkind,
        severity=severity,
        message=text[glog.end() :] if glog else text,
        attrs={**base, **attrs},
        **common,
    )
    return True


def _elastic(
    line_no: int,
    text: str,
    ctx: ParseContext,
    sink: Sink,
    base: dict[str, Any],
    common: dict[str, Any],
) -> bool:
    """A torchrun / elastic worker failure (``watchdog.elastic_failure``) as one event, timed by
    its glog stamp when it has one."""
    found = watchdog.elastic_failure(text)
    if found is None:
        return False
    subkind, pid, attrs = found
    g = watchdog.GLOG_ANY.search(text)
    ts, flag = glog_stamp(g["md"], g["hms"], g["frac"], ctx) if g else (None, None)
    if ts is None and flag is None:
        ts, flag = common["ts"], common["ts_flag"]
    _emit(
        sink,
        ctx,
        line_no,
        kind=Kind.PROCESS_FAILED,
        subkind=subkind,
        severity=Severity.ERROR,
        message=text[g.end() :] if g else text,
        attrs={**base, **attrs},
        **{**common, "ts": ts, "ts_flag": flag, "pid": pid},
    )
    return True


def _watchdog(
    line_no: int,
    raw: str,
    text: str,
    ctx: ParseContext,
    sink: Sink,
    base: dict[str, Any],
    common: dict[str, Any],
) -> bool:
    m = WATCHDOG.search(text)
    cut = None if m else WATCHDOG_CUT.search(text)
    if not m and not cut:
        sink.quarantine.append((line_no, raw, "unrecognized watchdog timeout line"))
        return False
    if m is None:
        assert cut is not None
        m = cut
        seq = _SEQ_NUM.match(cut["fields"] or "")
        attrs = {**base, "seq_num": int(seq[1]) if seq else None, "truncated": True}
    else:
        attrs = {**base, **{k: _int(v) for k, v in m.groupdict().items() if k != "op_type"}}
        attrs["op_type"] = m["op_type"]
    before = text[: m.start()]
    rethrown = "terminated with exception" in before or "what()" in before
    _emit(
        sink,
        ctx,
        line_no,
        kind=Kind.NCCL_TIMEOUT,
        subkind="rethrown" if rethrown else "watchdog",
        severity=Severity.ERROR,
        message=text[m.start() :],
        attrs=attrs,
        **common,
    )
    return True


def _nccl_error_in(
    line_no: int,
    text: str,
    st: TorchState,
    ctx: ParseContext,
    sink: Sink,
    base: dict[str, Any],
    common: dict[str, Any],
    key: tuple[Any, ...] = (),
) -> bool:
    m = NCCL_ERROR_IN.search(text)
    if not m:
        return False
    if st.pending is not None and st.pending_key != key:
        _park(st)  # another process's block, still open
    flush_pending(st, sink)
    if key in st.parked:  # this process's earlier block ends here
        _emit_block(st.parked.pop(key)[0], sink)
    exc = (m["exc"] or "").rsplit(".", 1)[-1] or None
    attrs = {
        **base,
        "exception": exc,
        "where": m["where"],
        "reason": m["reason"],
        "nccl_version": m["version"],
    }
    st.pending = make_event(
        ctx,
        line_no,
        source=Source.PYTORCH,
        kind=Kind.NCCL_ERROR,
        subkind=reason_subkind(m["reason"]) or "dist_backend",
        severity=Severity.ERROR,
        message=text,
        **common,
    )
    st.pending["_attrs"] = attrs  # encoded by ``flush_pending``, once the block is complete
    st.pending_last = line_no
    st.pending_key = key
    return True


# How far apart (in lines) two lines of one DistBackendError block may be: several processes (or
# other families) writing to one stream put their lines between a block's own.
BLOCK_GAP = 8


def block_key(pre: Prefix) -> tuple[Any, ...]:
    """What tells one process's lines from another's in a shared stream: its launcher prefix."""
    return (pre.host, pre.rank, pre.ray_pid, pre.ray_ip)


def _park(st: TorchState) -> None:
    """Set the pending block aside (another process's block starts)."""
    if st.pending is not None:
        st.parked[st.pending_key] = (st.pending, st.pending_last, st.expect_detail)
        st.pending, st.expect_detail = None, 0


def _unpark(line_no: int, key: tuple[Any, ...], st: TorchState, sink: Sink) -> None:
    """Flush the set-aside blocks the gap has closed; bring back the line's process's block."""
    for k in [k for k, (_, last, _) in st.parked.items() if line_no - last > BLOCK_GAP]:
        _emit_block(st.parked.pop(k)[0], sink)
    if key in st.parked:
        _park(st)
        st.pending, st.pending_last, st.expect_detail = st.parked.pop(key)
        st.pending_key = key


def _is_start(text: str) -> bool:
    return "NCCL error" in text and NCCL_ERROR_IN.search(text) is not None


def _continue(line_no: int, text: str, st: TorchState, same: bool = True) -> bool:
    """Fold a ``ncclXxxError:`` / ``Last error:`` / detail line into the pending error event. The
    detail is the next line of the block's own process (``same``); behind other processes'
    lines, never a new block's start."""
    assert st.pending is not None
    attrs = st.pending["_attrs"]
    m = RESULT_LINE.match(text.strip())
    if m and "result_text" not in attrs:
        st.pending["subkind"] = m["name"]
        attrs["result_text"] = m["text"]
    elif text.strip() == "Last error:":
        st.expect_detail = line_no
    elif st.expect_detail and same and (line_no == st.pending_last + 1 or not _is_start(text)):
        st.expect_detail = 0
        attrs["last_error"] = text.strip()
        peer = re.search(r"(?:from|to|peer) (?P<peer>[^\s<]+)<(?P<port>[0-9]+)>", text)
        if peer:
            attrs["peer"], attrs["peer_port"] = peer["peer"], int(peer["port"])
    else:
        return False
    st.pending_last = line_no
    st.pending["message"] = (st.pending["message"] + "\n" + text.strip())[:MESSAGE_CHARS]
    return True


def _emit_block(event: dict[str, Any], sink: Sink) -> None:
    event["attrs"] = attrs_json(event.pop("_attrs"))
    sink.events.append(event)


def flush_pending(st: TorchState, sink: Sink) -> None:
    if st.pending is None:
        return
    _emit_block(st.pending, sink)
    st.pending = None
    st.expect_detail = 0


# -- torchrun ChildFailedError ---------------------------------------------------------------------


def _failure_line(
    line_no: int,
    text: str,
    pre: Prefix,
    st: TorchState,
    ctx: ParseContext,
    sink: Sink,
    job_id: str | None,
) -> bool:
    if "ChildFailedError" in text and "Traceback" not in text:
        flush_failure(st, ctx, sink, job_id)
        st.in_failure_report, st.root_cause = True, False
        return True
    if "Root Cause (first observed failure)" in text:
        flush_failure(st, ctx, sink, job_id)
        st.in_failure_report, st.root_cause = True, True
        return True
    m = FAIL_FIELD.match(text)
    if not m or not st.in_failure_report:
        return False
    key, value = m["key"], m["value"].strip()
    if key == "time":
        flush_failure(st, ctx, sink, job_id)
        st.failure = {
            "line": line_no,
            "time": value,
            "root_cause": st.root_cause,
            "prefix_host": pre.host,
        }
    elif st.failure is None:
        return False
    else:
        st.failure[key] = value
        if key == "traceback":
            flush_failure(st, ctx, sink, job_id)
            st.in_failure_report = not st.root_cause  # the root cause is the report's last entry
    return True


def flush_failure(st: TorchState, ctx: ParseContext, sink: Sink, job_id: str | None) -> None:
    f = st.failure
    st.failure = None
    if f is None:
        return
    rank = re.match(r"(-?[0-9]+)(?: \(local_rank: (-?[0-9]+)\))?", f.get("rank", ""))
    code = re.match(r"(-?[0-9]+)(?: \(pid: ([0-9]+)\))?", f.get("exitcode", ""))
    ts, flag = None, None
    tm = re.match(r"([0-9]{4}-[0-9]{2}-[0-9]{2})_([0-9]{2}:[0-9]{2}:[0-9]{2})", f["time"])
    if tm:  # torchelastic writes the launcher's wall clock: the site's zone (--tz)
        ts, flag = to_utc(datetime.fromisoformat(f"{tm[1]}T{tm[2]}"), zone_of(ctx))
    attrs = {
        "rank": _int(rank[1]) if rank else None,
        "local_rank": _int(rank[2]) if rank else None,
        "exit_code": _int(code[1]) if code else None,
        "error_file": f.get("error_file"),
        "traceback": f.get("traceback"),
        "root_cause": f["root_cause"],
    }
    host = normalize_node(f.get("host")) or f["prefix_host"]
    sink.events.append(
        make_event(
            ctx,
            f["line"],
            source=Source.PYTORCH,
            kind=Kind.PROCESS_FAILED,
            subkind="child_failed",
            severity=Severity.ERROR,
            node=host,
            ts=ts,
            ts_flag=flag,
            pid=_int(code[2]) if code else None,
            message=f"rank {attrs['rank']} exited with code {attrs['exit_code']}"
            f" ({f.get('traceback') or 'no traceback'})",
            attrs=attrs,
            job_id=job_id,
        )
    )


def finish(st: TorchState, ctx: ParseContext, sink: Sink, job_id: str | None) -> None:
    flush_pending(st, sink)
    while st.parked:
        _emit_block(st.parked.popitem()[1][0], sink)
    flush_failure(st, ctx, sink, job_id)

"""Shared pieces of the Slurm parsers: states, durations, exit codes, times, host lists, GPUs.

Every helper has a scalar form (for the pure ``parse_line`` path) and, where it runs over whole
columns, a polars-expression form that must agree with it.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

import hostlist
import polars as pl

from faultlens.ingest.base import ChunkResult, ParseContext, normalize_node
from faultlens.ingest.schema import Kind, Severity, Source, conform
from faultlens.ingest.slurm.timefmt import read_time, time_exprs
from faultlens.ingest.zones import AMBIGUOUS, GAP, zone_of

SOURCE = Source.SLURM.value

# Job states of sacct (base words); a fixed-width column may cut them (``OUT_OF_ME+``).
JOB_STATES = (
    "BOOT_FAIL",
    "CANCELLED",
    "COMPLETED",
    "COMPLETING",
    "CONFIGURING",
    "DEADLINE",
    "FAILED",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PENDING",
    "PREEMPTED",
    "REQUEUED",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "RESIZING",
    "RESV_DEL_HOLD",
    "REVOKED",
    "RUNNING",
    "SIGNALING",
    "SPECIAL_EXIT",
    "STAGE_OUT",
    "STOPPED",
    "SUSPENDED",
    "LAUNCH_FAILED",
    "UPDATE_DB",
    "POWER_UP_NODE",
    "RECONFIG_FAIL",
)
STATE_WORD = re.compile(r"^[A-Z][A-Z_]*\+?$")
# A cut state word completes to the first state it starts.
_STATE_PREFIX: dict[str, str] = {}
for _s in JOB_STATES:
    for _i in range(1, len(_s)):
        _STATE_PREFIX.setdefault(_s[:_i], _s)

SEVERITY = {
    Kind.NODE_DOWN: Severity.ERROR,
    Kind.NODE_DRAIN: Severity.WARNING,
    Kind.NODE_NOT_RESPONDING: Severity.WARNING,
    Kind.NODE_RESUME: Severity.INFO,
    Kind.JOB_REQUEUE: Severity.WARNING,
    Kind.JOB_NODE_FAIL: Severity.ERROR,
    Kind.SLURM_ERROR: Severity.ERROR,
}

# -- states ----------


def split_state(text: str | None) -> tuple[str | None, str | None]:
    """``CANCELLED by 1003`` -> (CANCELLED, 'by 1003'); ``CANCELLED+`` -> (CANCELLED, None);
    ``OUT_OF_ME+`` -> (OUT_OF_MEMORY, None). (None, None) when it is not a state."""
    if text is None or not text.strip():
        return None, None
    word, _, rest = text.strip().partition(" ")
    if not STATE_WORD.match(word):
        return None, None
    base = word.rstrip("+")
    if word.endswith("+") and base not in JOB_STATES:
        base = _STATE_PREFIX.get(base, base)
    return base, (rest.strip() or None)


def state_exprs(col: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """Vectorized ``split_state``: (base state, detail)."""
    text = col.str.strip_chars()
    word = text.str.extract(r"^(\S+)")
    ok = word.str.contains(r"^[A-Z][A-Z_]*\+?$")
    base = word.str.strip_chars_end("+")
    truncated = word.str.ends_with("+") & ~base.is_in(JOB_STATES)
    fixed = pl.when(truncated).then(base.replace(_STATE_PREFIX)).otherwise(base)
    detail = text.str.extract(r"^\S+\s+(.+)$").str.strip_chars()
    return (
        pl.when(ok).then(fixed).otherwise(None),
        pl.when(ok & (detail != "")).then(detail).otherwise(None),
    )


# -- durations and exit codes ----------

_DURATION = re.compile(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+(?:\.\d+)?)$")
_DURATION_PL = r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+(?:\.\d+)?)$"


def parse_duration(text: str | None) -> float | None:
    """``D-HH:MM:SS`` / ``HH:MM:SS`` / ``MM:SS(.fff)`` -> seconds; None otherwise."""
    if not text:
        return None
    m = _DURATION.match(text.strip())
    if not m:
        return None
    days, hours, minutes, secs = m.groups()
    return int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes) * 60 + float(secs)


def duration_expr(col: pl.Expr) -> pl.Expr:
    g = col.str.strip_chars().str.extract_groups(_DURATION_PL)
    days = g.struct.field("1").cast(pl.Float64).fill_null(0)
    hours = g.struct.field("2").cast(pl.Float64).fill_null(0)
    mins = g.struct.field("3").cast(pl.Float64)
    secs = g.struct.field("4").cast(pl.Float64)
    return days * 86400 + hours * 3600 + mins * 60 + secs


def parse_exit(text: str | None) -> tuple[int | None, int | None]:
    """``code:signal`` -> (code, signal)."""
    m = re.match(r"^\s*(\d+):(\d+)\s*$", text or "")
    return (int(m[1]), int(m[2])) if m else (None, None)


def exit_exprs(col: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    g = col.str.extract_groups(r"^\s*(\d+):(\d+)\s*$")
    return g.struct.field("1").cast(pl.Int32, strict=False), g.struct.field("2").cast(
        pl.Int32, strict=False
    )


# -- times ----------


def parse_time(text: str | None, tz: str | None = None) -> datetime | None:
    """A time as sacct / sinfo print it (``2024-01-02T03:04:05`` or another ``SLURM_TIME_FORMAT``,
    local time of the cluster; UTC unless ``tz``) -> naive UTC (``timefmt.read_time``)."""
    return read_time(text, tz)[0]


def time_expr(col: pl.Expr, tz: str | None = None) -> pl.Expr:
    """Vectorized ``parse_time``."""
    return time_exprs(col, tz)[0]


def event_time(text: str | None, tz: str | None) -> tuple[datetime | None, str | None]:
    """(time, ``ts_flag``) of an event dated by a printed time (``parse_time``): ``no_ts``
    without one, ``tz_ambiguous`` / ``tz_gap`` for a wall-clock time ``tz`` has twice / never."""
    ts, flag = read_time(text, tz)
    return ts, (flag if flag in (AMBIGUOUS, GAP) else None if ts else "no_ts")


def epoch_to_dt(value: Any) -> datetime | None:
    """slurmrestd epoch seconds (or ``{set, number}``) -> naive UTC; 0 / unset -> None."""
    value = unwrap(value)
    if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
        return None
    try:
        return datetime(1970, 1, 1) + timedelta(seconds=float(value))
    except OverflowError:
        return None


def unwrap(value: Any) -> Any:
    """slurmrestd numbers come as ``{"set": bool, "infinite": bool, "number": N}``."""
    if isinstance(value, dict) and "number" in value:
        if not value.get("set", True) or value.get("infinite"):
            return None
        return value.get("number")
    return value


# -- nodes and host lists ----------

_NO_NODES = ("", "none assigned", "(null)", "none", "n/a")


def expand_nodes(text: str | None) -> list[str] | None:
    """Slurm host list -> normalized node names. ``None assigned`` -> []; unparseable -> None."""
    if text is None:
        return None
    text = text.strip()
    if text.lower() in _NO_NODES:
        return []
    try:
        names = hostlist.expand_hostlist(text)
    except (hostlist.BadHostlist, ValueError, TypeError, RecursionError):
        return None
    out = [normalize_node(n) for n in names]
    return [n for n in out if n]


def nodes_expr(col: pl.Expr, name: str = "nodes") -> pl.Expr:
    """Vectorized ``expand_nodes``: each distinct host list is expanded once."""
    return col.map_batches(
        lambda s: _expand_series(s), return_dtype=pl.List(pl.String), is_elementwise=True
    ).alias(name)


def _expand_series(s: pl.Series) -> pl.Series:
    uniq = s.drop_nulls().unique()
    lookup = pl.DataFrame(
        {"key": uniq, "val": [expand_nodes(v) for v in uniq.to_list()]},
        schema={"key": pl.String, "val": pl.List(pl.String)},
    )
    frame = pl.DataFrame({"key": s.cast(pl.String)})
    return frame.join(lookup, on="key", how="left", maintain_order="left")["val"]


# -- GPUs from TRES / GRES ----------

_TRES_GPU = re.compile(r"(?:^|,)gres/gpu=(\d+)")
_TRES_GPU_TYPED = re.compile(r"(?:^|,)gres/gpu:[^=,]+=(\d+)")
_GRES_GPU = re.compile(r"(?:^|,)(?:gres:)?gpu(?::[^:,(]+)?:(\d+)")


def gpus_in(text: str | None) -> int | None:
    """GPU count of a TRES (``gres/gpu=2``, ``gres/gpu:a100=2``) or GRES (``gpu:a100:2``) string."""
    if not text:
        return None
    for pat in (_TRES_GPU, _TRES_GPU_TYPED, _GRES_GPU):
        m = pat.search(text)
        if m:
            return int(m[1])
    return None


def gpus_expr(col: pl.Expr) -> pl.Expr:
    return pl.coalesce(
        col.str.extract(_TRES_GPU.pattern).cast(pl.Int32),
        col.str.extract(_TRES_GPU_TYPED.pattern).cast(pl.Int32),
        col.str.extract(_GRES_GPU.pattern).cast(pl.Int32),
    )


def pick_gpus(*texts: str | None) -> int | None:
    """First GPU count among AllocTRES, ReqTRES, GRES; 0 if any of them is known but has none."""
    for t in texts:
        n = gpus_in(t)
        if n is not None:
            return n
    return 0 if any(t and t.strip() for t in texts) else None


def pick_gpus_expr(*cols: pl.Expr) -> pl.Expr:
    any_known = pl.any_horizontal([c.str.strip_chars().str.len_chars() > 0 for c in cols])
    return pl.coalesce(*[gpus_expr(c) for c in cols], pl.when(any_known).then(pl.lit(0, pl.Int32)))


# -- node-state reasons ----------

_REASON_STAMP = re.compile(r"\s*\[([^\]@]*)@(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\]\s*$")


def split_reason(text: str | None) -> tuple[str | None, str | None, str | None]:
    """``Xid 79 [root@2024-01-02T03:04:05]`` -> ('Xid 79', 'root', '2024-01-02T03:04:05')."""
    if text is None:
        return None, None, None
    m = _REASON_STAMP.search(text)
    if not m:
        return (text.strip() or None), None, None
    return (text[: m.start()].strip() or None), (m[1] or None), m[2]


def xid_in(reason: str | None) -> int | None:
    m = re.search(r"\bxid\s*[:=#]?\s*(\d{1,3})\b", reason or "", re.IGNORECASE)
    return int(m[1]) if m else None


# -- results ----------


def result(
    tables: dict[str, pl.DataFrame], parsed: int, quarantine: pl.DataFrame | None = None
) -> ChunkResult:
    return ChunkResult(
        tables={k: conform(k, v) for k, v in tables.items() if v is not None and v.height},
        parsed=parsed,
        quarantine=quarantine if quarantine is not None and quarantine.height else None,
    )


def tz_of(ctx: ParseContext) -> str | None:
    """The zone of the cluster's zone-less times (``ingest.zones.zone_of``; None for UTC)."""
    return zone_of(ctx)

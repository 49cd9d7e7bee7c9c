"""The vocabulary of incident records: column names, time forms, and the category taxonomy.

``categorize`` maps a record's own level / class / description to ``IncidentCategory`` by the
first rule whose pattern matches (class and description before the level, so that "Hardware /
Graphics Accel Hdwr" is a GPU and "Hardware / Memory Dimm" the host). ``categorize_expr`` is the
same rules as a polars expression (the test checks the two agree).
"""

from __future__ import annotations

import re
from datetime import datetime

import polars as pl

from faultlens.ingest.base import node_expr
from faultlens.ingest.prefixes import ZONE_SUFFIX, zone_minutes
from faultlens.ingest.schema import TS, IncidentCategory, Severity
from faultlens.ingest.zones import localize, zone_flag

# Role -> the column names (slugged: lower case, non-alphanumerics as "_") that play it.
ALIASES: dict[str, tuple[str, ...]] = {
    "node": (
        "node",
        "node_name",
        "nodename",
        "host",
        "hostname",
        "host_name",
        "machine",
        "server",
        "location",
        "node_id",
        "nodenum",
        "node_number",
        "instance",
    ),
    "start": (
        "start",
        "start_time",
        "started",
        "started_at",
        "prob_started",
        "problem_started",
        "failure_time",
        "fail_time",
        "failed_at",
        "begin",
        "opened",
        "opened_at",
        "created",
        "created_at",
        "start_s",
        "start_h",
        "start_d",
        "time",
        "timestamp",
        "ts",
        "time_s",
        "time_h",
        "time_d",
        "date",
    ),
    "end": (
        "end",
        "end_time",
        "ended",
        "ended_at",
        "prob_fixed",
        "problem_fixed",
        "fixed",
        "fixed_at",
        "resolved",
        "resolved_at",
        "repaired",
        "repaired_at",
        "recovered",
        "closed",
        "closed_at",
        "end_s",
        "end_h",
        "end_d",
    ),
    "duration": (
        "down_time",
        "downtime",
        "downtime_min",
        "downtime_h",
        "duration",
        "duration_s",
        "duration_min",
        "duration_h",
        "repair_h",
        "repair_hours",
        "repair_min",
        "repair_time",
        "ttr_h",
        "time_to_repair",
    ),
    "level": (
        "level",
        "category",
        "category_level",
        "root_cause",
        "cause",
        "failure_type",
        "problem_type",
        "type",
    ),
    "class": (
        "class",
        "category_class",
        "subcategory",
        "sub_category",
        "subcause",
        "sub_cause",
        "component",
        "category_component",
    ),
    "description": (
        "description",
        "category_description",
        "desc",
        "summary",
        "message",
        "details",
        "detail",
        "reason",
        "symptom",
        "notes",
        "note",
        "text",
        "content",
    ),
    "severity": ("severity", "priority", "impact"),
    "event": ("event", "event_type", "transition", "state", "action"),
    "gpu": ("gpu", "gpu_index", "gpu_id", "pci_bus_id", "gpu_serial"),
    "partition": ("partition", "system", "cluster", "queue", "pool"),
    "rack": ("rack", "cabinet", "leaf", "leaf_switch"),
    "fleet_size": ("nodes", "number_of_nodes", "num_nodes", "n_nodes", "system_nodes"),
}

# Column names that are a category level whose cell holds the cause (one column per level).
LEVEL_COLUMNS = frozenset(
    {
        "facilities",
        "hardware",
        "human_error",
        "network",
        "undetermined",
        "software",
        "environment",
        "user",
        "maintenance",
        "unknown",
    }
)

# (category, pattern) in priority order, matched against "class | description", then the level.
RULES: tuple[tuple[IncidentCategory, str], ...] = (
    (IncidentCategory.MAINTENANCE, r"maint|scheduled|planned|upgrade|preventive"),
    (IncidentCategory.USER, r"human|operator|user|admin error|\bjob\b"),
    (
        IncidentCategory.GPU_MEMORY,
        r"\bdbe\b|double.?bit|\bhbm|row.?remap|retired page|gpu.?mem|\bsram\b|\becc\b",
    ),
    (IncidentCategory.GPU, r"\bgpu|\botb\b|off the bus|\bxid|graphics|nvlink|\bgsp\b|nvswitch"),
    (
        IncidentCategory.NETWORK,
        r"network|switch|cable|\bib\b|infiniband|\bnic\b|\bhca\b|interconnect|ethernet|"
        r"myrinet|quadrics|\blink\b|fabric|router",
    ),
    (
        IncidentCategory.SOFTWARE,
        r"software|\bos\b|kernel|driver|nccl|file ?system|\bfs\b|scheduler|\bmpi\b|patch|bug|"
        r"firmware|application|library|daemon|slurm|cuda",
    ),
    (
        IncidentCategory.HOST,
        r"hardware|\bhw\b|cpu|memory|dimm|disk|\bssd|nvme|power|\bpsu|fan|motherboard|board|"
        r"chassis|facilit|cooling|chiller|\bups\b|environment|temperature|node",
    ),
    (IncidentCategory.UNKNOWN, r"undetermined|unknown|other|^$"),
)
HARDWARE_CATEGORIES = (
    IncidentCategory.GPU.value,
    IncidentCategory.GPU_MEMORY.value,
    IncidentCategory.HOST.value,
    IncidentCategory.NETWORK.value,
)
WARNING_RE = r"(?i)warn|degrad|minor|low|info|notice"
# the levels of a log line (syslog's, Java's, BlueGene/L's), as a whole value
LOG_LEVEL_RE = (
    r"(?i)^(?:debug|trace|info|notice|warn|warning|error|err|severe|crit|critical|alert|emerg"
    r"|fatal|failure)$"
)

_SLUG = re.compile(r"[^0-9a-z]+")


def slug(name: str) -> str:
    return _SLUG.sub("_", name.strip().lower()).strip("_")


def categorize(level: str | None, klass: str | None, description: str | None) -> IncidentCategory:
    """The taxonomy category of one record (the reference path of ``categorize_expr``)."""
    detail = " | ".join(x for x in (klass, description) if x).lower()
    for text in (detail, (level or "").lower()):
        if not text:
            continue
        for category, pattern in RULES:
            if category is not IncidentCategory.UNKNOWN and re.search(pattern, text):
                return category
    return IncidentCategory.UNKNOWN


def categorize_expr(level: pl.Expr, klass: pl.Expr, description: pl.Expr) -> pl.Expr:
    detail = pl.concat_str(
        [klass.cast(pl.String), description.cast(pl.String)], separator=" | ", ignore_nulls=True
    )
    detail = detail.str.to_lowercase().fill_null("")
    lvl = level.cast(pl.String).str.to_lowercase().fill_null("")
    out = pl.lit(IncidentCategory.UNKNOWN.value)
    for text in (lvl, detail):  # built inside out: the detail's rules are checked first
        for category, pattern in reversed(RULES):
            if category is IncidentCategory.UNKNOWN:
                continue
            out = pl.when(text.str.contains(pattern)).then(pl.lit(category.value)).otherwise(out)
    return out


def severity_expr(category: pl.Expr, text: pl.Expr) -> pl.Expr:
    """``warning`` when the record says so, else ``critical`` for the node's hardware and
    ``error`` for other failures."""
    hard = category.is_in(
        [IncidentCategory.GPU.value, IncidentCategory.GPU_MEMORY.value, IncidentCategory.HOST.value]
    )
    return (
        pl.when(text.str.contains(WARNING_RE).fill_null(False))
        .then(pl.lit(Severity.WARNING.value))
        .when(hard)
        .then(pl.lit(Severity.CRITICAL.value))
        .otherwise(pl.lit(Severity.ERROR.value))
    )


def duration_unit(column: str, default: str) -> str:
    """The unit a column name's suffix gives (``repair_h``, ``duration_min``, ``start_s``)."""
    s = slug(column)
    for unit, suffixes in (
        ("min", ("_min", "_mins", "_minutes")),
        ("h", ("_h", "_hr", "_hrs", "_hours")),
        ("d", ("_d", "_day", "_days")),
        ("s", ("_s", "_sec", "_secs", "_seconds")),
    ):
        if s.endswith(suffixes):
            return unit
    return default


_TIME_FORMATS = (
    "%Y-%m-%dT%H:%M:%S%.f",
    "%Y-%m-%d %H:%M:%S%.f",
    "%Y-%m-%dT%H:%M:%S",
    "%Y-%m-%d %H:%M:%S",
    "%Y-%m-%dT%H:%M",
    "%Y-%m-%d %H:%M",
    "%m/%d/%Y %H:%M:%S",
    "%m/%d/%Y %H:%M",
    "%m/%d/%y %H:%M",
    "%Y/%m/%d %H:%M:%S",
    "%Y-%m-%d",
    "%m/%d/%Y",
    "%Y-%m-%d-%H.%M.%S%.f",  # BlueGene/L RAS records
)
_PER_S = {"s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
UNIX_MIN_S = 1e8  # a bare number above this without --epoch is Unix seconds (after 1973)


# a zone after a clock time: Z / UTC / GMT / UT or a numeric offset (+01:00, +0100, +01), with or
# without a space before it; the clock (H:MM) before it keeps a date's own "-01" from reading as one
_ZONED = r"^(.*\d:\d\d(?::\d\d(?:\.\d+)?)?)\s*" + ZONE_SUFFIX + "$"


def parse_times(text: pl.Expr, epoch: datetime | None, unit: str) -> pl.Expr:
    """Timestamps from ISO / US forms (a zone suffix is converted to UTC), Unix seconds, or
    offsets in ``unit`` from ``epoch``; a form without a zone is read as UTC."""
    return zoned_times(text, epoch, unit, None)[0]


def zoned_times(
    text: pl.Expr, epoch: datetime | None, unit: str, tz: str | None
) -> tuple[pl.Expr, pl.Expr]:
    """(``parse_times``, flag) with the forms without a zone read as ``tz``'s wall clock: a
    time ``tz`` has twice or never is null, flagged ``tz_ambiguous`` / ``tz_gap``. A time with
    its own zone (``2026-01-01 10:00:00+01:00``, ``... +0100``, ``...T10:00Z``, ``... UTC``) is
    that instant whatever ``tz`` says (the zone read by ``prefixes.zone_minutes``)."""
    stripped = text.str.strip_chars()
    parts = stripped.str.extract_groups(_ZONED)
    zone = parts.struct.field("2")
    clock = pl.coalesce([parts.struct.field("1"), stripped])
    local = pl.coalesce(
        [clock.str.to_datetime(f, strict=False, time_unit="us") for f in _TIME_FORMATS]
    )
    number = text.cast(pl.Float64, strict=False)
    if epoch is not None:
        offset = pl.lit(epoch, TS) + pl.duration(microseconds=number * _PER_S[unit] * 1e6)
    else:
        offset = pl.when(number > UNIX_MIN_S).then(
            pl.lit(datetime(1970, 1, 1), TS) + pl.duration(microseconds=number * 1e6)
        )
    zoned = pl.when(zone.is_not_null()).then(local - pl.duration(minutes=zone_minutes(zone)))
    if not tz:
        return pl.coalesce([zoned, local, offset.cast(TS)]).cast(TS), pl.lit(None, pl.String)
    placed = pl.when(zone.is_null()).then(localize(local, tz))
    flag = pl.when(zone.is_null()).then(zone_flag(local, tz))
    return pl.coalesce([zoned, placed, offset.cast(TS)]).cast(TS), flag


def node_name_expr(node: pl.Expr, system: pl.Expr) -> pl.Expr:
    """A normalized node name; a bare number is made unique by its system (``2-n17``); a record
    naming only its system is the system's (``17-system``)."""
    bare = node.str.contains(r"^\d+$").fill_null(False)
    numbered = pl.concat_str([system.fill_null("sys"), pl.lit("-n"), node])
    whole = pl.when(node.is_null() & system.is_not_null()).then(
        pl.concat_str([system, pl.lit("-system")])
    )
    return node_expr(pl.when(bare).then(numbered).otherwise(pl.coalesce([node, whole])))

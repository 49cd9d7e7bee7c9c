"""The failure model's feature catalog: the hourly base columns (events, telemetry, jobs,
attributions, failures), the windows each is summed or maxed over, and the feature names built
from them, in the model's column order. ``models.features`` computes them from the database."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import polars as pl

from faultlens.ingest.catalog import packaged_catalog

HOUR = timedelta(hours=1)
HOUR_US = 3_600_000_000
W1, W6, W24, W72, W7D, W28D = 1, 6, 24, 72, 168, 672
MAX_WINDOW_H = W28D
HOURS_SINCE_CAP = float(W28D)
# Clock-event reasons that mean the hardware slowed itself down: HW slowdown, SW / HW thermal,
# HW power brake (DCGM_FI_DEV_CLOCK_THROTTLE_REASONS bits 0x8, 0x20, 0x40, 0x80).
THROTTLE_HW_MASK = 0x8 | 0x20 | 0x40 | 0x80


@dataclass(frozen=True)
class Base:
    """One hourly base column and the windows (hours) it is summed (or maxed) over."""

    name: str
    source: str  # events | telemetry | jobs | attributions | failures
    windows: tuple[int, ...]
    agg: str = "sum"  # sum | max
    cond: str = ""  # SQL filter for events / telemetry metric list key
    params: tuple[object, ...] = ()


def _catalog_sets() -> tuple[dict[str, list[int]], list[int], list[int]]:
    cat = packaged_catalog()
    by_cat: dict[str, list[int]] = {}
    for xid, category in zip(cat["xid"].to_list(), cat["category"].to_list(), strict=True):
        by_cat.setdefault(category, []).append(int(xid))
    severe = ["reset_gpu", "reboot_node", "drain_node"]
    critical = cat.filter(pl.col("typical_action").is_in(severe))
    drain = cat.filter(pl.col("typical_action").is_in(["reboot_node", "drain_node"]))
    return (
        by_cat,
        sorted(int(x) for x in critical["xid"].to_list()),
        sorted(int(x) for x in drain["xid"].to_list()),
    )


# Hardware warnings: what a part on its way out logs before it fails (correctable ECC, row
# remaps, contained ECC, non-fatal NVLink, corrected PCIe AER, GSP timeouts, host EDAC / MCE,
# NVMe timeouts, thermal), never a target event itself. A healthy part logs one or two of them
# now and then; a failing one escalates: more of them, on one GPU, over hours to days. The
# ``warn`` features count them of any kind, so that an escalation of a rarely seen kind still
# looks like one; ``warn_streak`` is, per event, the warnings of the same GPU (or of the node, for
# host warnings) in the ``WARN_STREAK_H`` hours up to it, maxed over the window; ``warn_span`` is,
# per event, the hours from the first of those warnings to it: a blip is over within a few hours,
# a part on its way out keeps warning for a day or more, so the span tells a recurring warning
# from a burst of the same size (and a rarely seen kind's recurrence from its one-off blip).
WARN_KINDS = (
    "ecc",
    "row_remap",
    "nvlink",
    "sxid",
    "pcie",
    "gsp_timeout",
    "thermal",
    "memory",
    "mce",
    "storage",
)
WARN_XIDS = (63, 74, 92, 94, 119, 144, 145, 146, 147, 148, 149, 150)
WARN_STREAK_H = 72
XID_CATEGORIES = ("memory", "hardware", "interconnect", "driver", "application", "other")
KEY_XIDS = (13, 31, 48, 63, 64, 74, 79, 92, 94, 95, 119)
_BY_CAT, CRITICAL_XIDS, DRAIN_XIDS = _catalog_sets()


def _ev(name: str, windows: tuple[int, ...], cond: str, *params: object) -> Base:
    return Base(name, "events", windows, "sum", cond, params)


def _kinds(name: str, windows: tuple[int, ...], *kinds: str) -> Base:
    return _ev(name, windows, "list_contains(?::VARCHAR[], kind)", list(kinds))


EVENT_BASES: tuple[Base, ...] = (
    _ev("xid_all", (W1, W24, W7D, W28D), "kind = 'xid'"),
    _ev(
        "xid_critical",
        (W1, W24, W7D),
        "kind = 'xid' AND list_contains(?::INTEGER[], code)",
        CRITICAL_XIDS,
    ),
    _ev("xid_drain", (W1, W24), "kind = 'xid' AND list_contains(?::INTEGER[], code)", DRAIN_XIDS),
    *(
        _ev(
            f"xid_{c}",
            (W1, W24, W7D),
            "kind = 'xid' AND list_contains(?::INTEGER[], code)",
            _BY_CAT.get(c, []),
        )
        for c in XID_CATEGORIES
    ),
    *(_ev(f"xid{x}", (W24, W7D), "kind = 'xid' AND code = ?", x) for x in KEY_XIDS),
    _kinds("ecc", (W1, W24, W7D), "ecc"),
    _kinds("row_remap", (W24, W7D), "row_remap"),
    _kinds("nvlink", (W1, W24, W7D), "nvlink", "sxid"),
    _kinds("pcie", (W24, W7D), "pcie"),
    _kinds("off_bus", (W24, W7D), "fallen_off_bus", "gpu_init_fail", "reset_required"),
    _kinds("gsp", (W24, W7D), "gsp_timeout"),
    _kinds("thermal", (W24, W7D), "thermal"),
    _kinds("host_mem", (W24, W7D), "memory", "mce"),
    _kinds("ib_port", (W24, W7D), "ib_port"),
    _kinds("hung_task", (W24, W7D), "hung_task"),
    _kinds("unhealthy", (W24, W7D), "device_unhealthy", "diag"),
    _kinds("nccl_error", (W1, W24, W7D), "nccl_error"),
    _kinds("nccl_timeout", (W1, W24, W7D), "nccl_timeout"),
    _kinds("process_failed", (W24, W7D), "process_failed"),
    _kinds("node_down", (W24, W7D, W28D), "node_down", "node_not_responding"),
    _kinds("node_drain", (W24, W7D, W28D), "node_drain"),
    _kinds("job_requeue", (W7D, W28D), "job_requeue"),
    _ev("severe", (W1, W24), "severity IN ('error', 'critical')"),
    _ev("warn", (W1, W6, W24, W72, W7D), "warn"),
    Base("warn_streak", "events", (W24, W72), "max", "warn"),
    Base("warn_span", "events", (W24, W72), "max", "warn"),
    _kinds("pcie_w", (W72,), "pcie"),
    _kinds("gsp_w", (W72,), "gsp_timeout"),
    _ev("xid74_w", (W72,), "kind = 'xid' AND code = 74"),
    _ev("xid63_w", (W72,), "kind = 'xid' AND code = 63"),
)

# Telemetry: counters become hourly increments; gauges become hourly max / sum / sample count.
COUNTER_METRICS: dict[str, tuple[str, ...]] = {
    "ecc_sbe_inc": ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL"),
    "ecc_dbe_inc": ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL"),
    "retired_inc": (
        "DCGM_FI_DEV_RETIRED_SBE",
        "DCGM_FI_DEV_RETIRED_DBE",
        "DCGM_FI_DEV_RETIRED_PENDING",
    ),
    "remap_corr_inc": ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",),
    "remap_uncorr_inc": ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",),
    "remap_fail_inc": ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_ROW_REMAP_PENDING"),
    "pcie_replay_inc": ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER",),
    "nvlink_err_inc": (
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
    ),
    "violation_inc": (
        "DCGM_FI_DEV_THERMAL_VIOLATION",
        "DCGM_FI_DEV_POWER_VIOLATION",
        "DCGM_FI_DEV_RELIABILITY_VIOLATION",
    ),
}
COUNTER_WINDOWS: dict[str, tuple[int, ...]] = {
    "ecc_sbe_inc": (W1, W24, W7D),
    "pcie_replay_inc": (W1, W24, W7D),
    "nvlink_err_inc": (W1, W24, W7D),
}
# Per-hour increments below these floors are background, not evidence: NVLink CRC counters tick
# now and then on healthy long links [assumed: a handful per hour]. Without a floor the feature
# also says "this node is being scraped", which is not a property of the hardware.
COUNTER_NOISE_FLOOR: dict[str, float] = {"nvlink_err_inc": 10.0}
# Gauges. Only their excursions are features: ``temp_hot_*`` is degrees above TEMP_NORMAL_C
# (H100 / B200 run about 60-80 C under load and slow down near 87 C [assumed]); a normal reading
# and a missing one are the same 0. Raw temperature and power levels are left out on purpose:
# they mostly say whether telemetry was collected for the node, and where telemetry is exported
# (as in the synthetic cluster, around incidents) that would leak the answer.
GAUGE_METRICS: dict[str, tuple[str, ...]] = {
    "temp": ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_MEMORY_TEMP"),
}
TEMP_NORMAL_C = 80.0
THROTTLE_METRICS = ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS")

TELEMETRY_BASES: tuple[Base, ...] = (
    *(Base(n, "telemetry", COUNTER_WINDOWS.get(n, (W24, W7D))) for n in COUNTER_METRICS),
    Base("throttle_hw", "telemetry", (W24, W7D)),
    Base("temp_max", "telemetry", (W1, W24, W7D), "max"),
    Base("temp_sum", "telemetry", (W24,)),
    Base("temp_n", "telemetry", (W24,)),
)
OTHER_BASES: tuple[Base, ...] = (
    Base("node_fail_single", "jobs", (W7D, W28D)),
    Base("node_fail_multi", "jobs", (W7D, W28D)),
    Base("jobs_failed", "jobs", (W24, W7D)),
    Base("attr_any", "attributions", (W24, W7D, W28D)),
    Base("attr_hw", "attributions", (W7D, W28D)),
    Base("fail", "failures", (W24, W7D, W28D)),
)
BASES: tuple[Base, ...] = EVENT_BASES + TELEMETRY_BASES + OTHER_BASES
# Helper columns that only feed derived features (means) and are not features themselves.
_HELPERS = {"temp_sum_24h", "temp_n_24h", "temp_max_1h", "temp_max_24h", "temp_max_7d"}
TEMP_HOT = {
    "temp_hot_1h": "temp_max_1h",
    "temp_hot_24h": "temp_max_24h",
    "temp_hot_7d": "temp_max_7d",
}
# Per-kind weekly warning counts behind ``warn_kinds_7d`` (distinct warning kinds).
WARN_KIND_COLUMNS = (
    "ecc_7d",
    "row_remap_7d",
    "nvlink_7d",
    "pcie_7d",
    "gsp_7d",
    "thermal_7d",
    "host_mem_7d",
    "xid63_7d",
    "xid74_7d",
    "xid92_7d",
    "xid94_7d",
    "xid119_7d",
    "ecc_sbe_inc_7d",
    "pcie_replay_inc_7d",
    "nvlink_err_inc_7d",
    "retired_inc_7d",
    "remap_corr_inc_7d",
)
DERIVED_WARN = ("warn_kinds_7d", "warn_escalation")


def window_name(base: str, w: int) -> str:
    if w % 24 == 0 and w >= W7D:
        return f"{base}_{w // 24}d"
    return f"{base}_{w}h"


def feature_names() -> list[str]:
    """The model's feature columns, in order."""
    names = [window_name(b.name, w) for b in BASES for w in b.windows]
    names = [n for n in names if n not in _HELPERS]
    return [*names, *TEMP_HOT, "temp_hot_mean_24h", *DERIVED_WARN, "hours_since_fail"]


FEATURES: tuple[str, ...] = tuple(feature_names())

# Hardware-warning evidence (never a target event itself): more of it never lowers the risk.
# The model gets these as LightGBM monotone constraints, so that a rare warning kind with few
# training examples still pushes the score up instead of landing in a leaf learned from noise.
MONOTONE_BASES = frozenset(
    {
        "warn",
        "warn_streak",
        "warn_span",
        "pcie_w",
        "gsp_w",
        "xid74_w",
        "xid63_w",
        "pcie",
        "gsp",
        "thermal",
        "host_mem",
        "xid63",
        "xid92",
        "xid94",
        "xid119",
        "ecc_sbe_inc",
        "retired_inc",
        "remap_corr_inc",
        "pcie_replay_inc",
        "nvlink_err_inc",
        "violation_inc",
        "throttle_hw",
    }
)
MONOTONE_FEATURES = frozenset(
    {window_name(b.name, w) for b in BASES if b.name in MONOTONE_BASES for w in b.windows}
    | set(DERIVED_WARN)
    | set(TEMP_HOT)
    | {"temp_hot_mean_24h"}
)


def monotone_constraints() -> tuple[int, ...]:
    """LightGBM ``monotone_constraints`` for ``FEATURES``: +1 for warning evidence, else 0."""
    return tuple(1 if f in MONOTONE_FEATURES else 0 for f in FEATURES)

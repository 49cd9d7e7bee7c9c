"""What the failure predictor predicts, defined once.

A **hardware failure** of a node (and, where the evidence names one, of a GPU) is any of:

- an uncorrectable GPU event: Xid 48 (double-bit ECC), 64 (row-remap failure), 79 (fallen off
  the bus), 95 (uncontained ECC), 140 (ECC escaped containment). Xid 94 (*contained* ECC: the
  driver killed the one process that touched the page, the GPU keeps serving) is not a failure
  of the node; it is one of the strongest precursors of one;
- a fatal NVLink error: Xid 74 whose text says ``fatal error`` (not ``nonfatal``), or an NVLink5
  Xid 144-150 tagged ``Fatal`` (kind ``nvlink``, sub-kind ``Fatal``) - a "Faulty GPU" in the
  Llama 3 table includes its NVLink;
- an event of kind ``fallen_off_bus``, ``gpu_init_fail`` or ``reset_required`` (the GPU is gone,
  will not start, or the driver refuses it until a reset: the GSP failure signature);
- a ``row_remap`` event that is a failure, an ``ecc`` event that is uncorrectable;
- a critical host hardware event: an uncorrected (fatal) PCIe AER error, an uncorrectable EDAC
  memory error, a fatal machine check, a kernel panic;
- a Slurm ``node_down`` event (Slurm set the node DOWN: it stopped responding, or an admin or
  health check downed it naming hardware) and a ``node_drain`` whose reason names hardware
  (Xid, ECC, NVLink, GPU, diag, NVMe, PSU, ...); never a drain or down that faultlens itself asked
  for (reason starting ``faultlens``) and never a network reason (IB link, HCA, switch);
- a NODE_FAIL job the attribution step (``attributions``) blamed on this node's hardware (cause
  ``gpu_hardware``, ``gpu_memory`` or ``host``; a switch or cable is not the node's). A FAILED job
  is not enough: a software crash next to a correctable error is attributed to the hardware.

Snapshot counters (``nvidia-smi -q``: "uncorrectable errors since boot") are not events at their
timestamp and never make a target. Matching is on the event text without the node's own name
(``gpu0401`` would otherwise match ``gpu``).

Target events of one node less than ``EPISODE_GAP`` apart are one **failure episode**, stamped with
the time of its first event: a GPU that falls off the bus logs Xid 79, the job dies with NODE_FAIL,
and Slurm marks the node down, and that is one failure, not three.

A row (node or GPU, time ``t``) is **positive** when a failure episode of that node starts in
``[t, t + horizon)``; the default horizon is 24 hours.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl

from faultlens.ingest.schema import CauseCategory, Kind
from faultlens.ingest.store import Store

DEFAULT_HORIZON_H = 24.0
EPISODE_GAP = timedelta(hours=1)

TARGET_XIDS: tuple[int, ...] = (48, 64, 79, 95, 140)
NVLINK_XIDS: tuple[int, ...] = (74, 144, 145, 146, 147, 148, 149, 150)
TARGET_KINDS: tuple[str, ...] = (
    Kind.FALLEN_OFF_BUS.value,
    Kind.GPU_INIT_FAIL.value,
    Kind.RESET_REQUIRED.value,
    Kind.KERNEL_PANIC.value,
)
# (an incident record is ``critical`` when it names the node's own hardware: GPU, memory, host)
HOST_CRITICAL_KINDS: tuple[str, ...] = (
    Kind.PCIE.value,
    Kind.MEMORY.value,
    Kind.MCE.value,
    Kind.INCIDENT.value,
)
HARDWARE_CAUSES: tuple[str, ...] = (
    CauseCategory.GPU_HARDWARE.value,
    CauseCategory.GPU_MEMORY.value,
    CauseCategory.HOST.value,
)
SNAPSHOT_SOURCES: tuple[str, ...] = ("nvidia_smi",)
# A Slurm down / drain reason that names hardware (matched case-insensitively).
HARDWARE_REASON_RE = (
    r"(gpu|xid|ecc|pcie|nvlink|hbm|memory|dimm|fallen|bus|power supply|psu|fan|thermal|"
    r"hardware|\bhw\b|row.?remap|disk|ssd|nvme|cpu|mce|diag|not responding)"
)
# Reasons that are never the node's hardware: our own drains, the fabric.
NOT_HARDWARE_REASON_RE = r"(^faultlens|\bib\b|infiniband|hca|switch|cable|link down)"
_UNCORRECTABLE_RE = r"(dbe|double|uncorrect|uncontained|fatal|fail)"
_REASON_TEXT = (
    "replace(lower(coalesce(e.subkind, '') || ' ' || coalesce(e.message, '') || ' '"
    " || coalesce(e.attrs, '')), lower(e.node), '')"
)

# One SQL predicate over ``events`` (alias e) and its parameters, used everywhere.
TARGET_EVENT_SQL = (
    "(NOT list_contains(?::VARCHAR[], coalesce(e.source, '')) AND ("
    " (e.kind = 'xid' AND list_contains(?::INTEGER[], e.code))"
    " OR list_contains(?::VARCHAR[], e.kind)"
    " OR ((e.kind = 'nvlink' OR (e.kind = 'xid' AND list_contains(?::INTEGER[], e.code)))"
    "     AND (lower(coalesce(e.subkind, '')) = 'fatal'"
    "          OR regexp_matches(lower(coalesce(e.message, '')), '(^|[^n])fatal')))"
    " OR (e.kind = 'row_remap' AND (e.severity = 'critical'"
    "     OR regexp_matches(lower(coalesce(e.subkind, '')), 'fail')))"
    " OR (e.kind = 'ecc' AND (e.severity = 'critical'"
    "     OR regexp_matches(lower(coalesce(e.subkind, '')), ?)))"
    " OR (list_contains(?::VARCHAR[], e.kind) AND e.severity = 'critical')"
    " OR (e.kind IN ('node_down', 'node_drain')"
    f"     AND regexp_matches({_REASON_TEXT}, ?)"
    f"     AND NOT regexp_matches(trim(lower(coalesce(e.subkind, ''))), ?)"
    f"     AND NOT regexp_matches({_REASON_TEXT}, ?))))"
)


def target_event_params() -> list[object]:
    return [
        list(SNAPSHOT_SOURCES),
        list(TARGET_XIDS),
        list(TARGET_KINDS),
        list(NVLINK_XIDS),
        _UNCORRECTABLE_RE,
        list(HOST_CRITICAL_KINDS),
        HARDWARE_REASON_RE,
        NOT_HARDWARE_REASON_RE,
        NOT_HARDWARE_REASON_RE,
    ]


def target_events(
    store: Store, start: datetime, end: datetime, *, events: str | None = None
) -> pl.DataFrame:
    """Every target event with ``start <= ts < end``: node, gpu (index as text when known), ts,
    cause (``xid79``, ``fallen_off_bus``, ``attributed:gpu_hardware``, ...). ``events``: the
    table read; by default the store's ``notable_table`` if it has one (a reader's snapshot:
    ``rollup_notable`` holds every target event, see ``ingest.rollups``), else ``events``.
    Only the site's own files count: a file ingested into another dataset (``--dataset``, a
    public trace) is never a failure of the site's fleet."""
    events = events or getattr(store, "notable_table", None) or "events"
    sql = f"""
        WITH g AS (
            SELECT node, pci_bus_id, min(gpu_index) AS gi FROM gpus
            WHERE pci_bus_id IS NOT NULL GROUP BY ALL
        )
        SELECT e.node,
               coalesce(CAST(e.gpu_index AS VARCHAR), CAST(g.gi AS VARCHAR), e.gpu) AS gpu,
               e.ts,
               CASE WHEN e.kind = 'xid' THEN 'xid' || e.code ELSE e.kind END AS cause
        FROM {events} e LEFT JOIN g ON g.node = e.node AND g.pci_bus_id = e.gpu
        WHERE e.ts >= ? AND e.ts < ? AND e.node IS NOT NULL AND {TARGET_EVENT_SQL}
          AND (e.file IS NULL OR e.file NOT IN (SELECT file FROM dataset_files))
        UNION ALL
        SELECT a.node, NULL AS gpu, a."end" AS ts, 'attributed:' || a.cause AS cause
        FROM attributions a
        WHERE a."end" >= ? AND a."end" < ? AND a.node IS NOT NULL
          AND a.state LIKE 'NODE_FAIL%' AND list_contains(?::VARCHAR[], a.cause)
    """
    params = [start, end, *target_event_params(), start, end, list(HARDWARE_CAUSES)]
    return store.query(sql, params)


def failure_episodes(store: Store, start: datetime, end: datetime) -> pl.DataFrame:
    """Failure episodes starting in ``[start, end)``: node, ts (first event), gpu, cause, n_events.

    Events of a node closer than ``EPISODE_GAP`` to the previous one join its episode.
    """
    events = target_events(store, start - EPISODE_GAP, end)
    return episodes_from_events(events).filter(pl.col("ts") >= start)


def episodes_from_events(events: pl.DataFrame) -> pl.DataFrame:
    """Group target events into episodes (see module doc); vectorized over the whole frame."""
    schema = {
        "node": pl.String,
        "ts": pl.Datetime("us"),
        "gpu": pl.String,
        "cause": pl.String,
        "n_events": pl.UInt32,
    }
    if events.height == 0:
        return pl.DataFrame(schema=schema)
    ev = events.sort("node", "ts").with_columns(
        (
            (pl.col("ts") - pl.col("ts").shift(1).over("node") > EPISODE_GAP)
            | pl.col("ts").shift(1).over("node").is_null()
        )
        .cum_sum()
        .alias("episode")
    )
    out = ev.group_by("episode", maintain_order=True).agg(
        pl.col("node").first(),
        pl.col("ts").first(),
        pl.col("gpu").drop_nulls().first(),
        pl.col("cause").first(),
        pl.len().alias("n_events"),
    )
    return out.select(list(schema)).cast(schema)

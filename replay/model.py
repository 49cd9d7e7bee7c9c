"""The replay vocabulary: traces, job descriptions, badput buckets and the interval formulas.

Every default below is drawn from /work/shared/reference/published-figures.md, section B (recovery
costs) and A (failure rates); the comment on each field says where it comes from. ``[assumed]``
marks a value no source gives, chosen as a plausible order of magnitude.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

import numpy as np


class Badput(StrEnum):
    """Where the GPU-hours that did not train went (ml-goodput-measurement's buckets, adapted)."""

    CHECKPOINT_SAVE = "checkpoint_save"  # blocking checkpoint / snapshot writes
    RESTORE = "restore"  # reading the checkpoint back
    LOST_PROGRESS = "lost_progress"  # work done since the last usable checkpoint
    RESTART = "restart"  # requeue, init, NCCL setup, spare swap, reconfiguration, migration
    WAIT_NODE = "wait_node"  # no healthy node to continue on
    REDUCED_THROUGHPUT = "reduced_throughput"  # running on fewer nodes (elastic)


BUCKETS: tuple[Badput, ...] = tuple(Badput)


@dataclass(frozen=True)
class Trace:
    """Interruptions of one cluster over a window, as seen by the job being replayed.

    Times are hours from ``start``. ``node`` is an integer node index (-1 unknown). ``hardware``
    marks events that take a node out for repair; ``warned`` events gave warning (planned
    maintenance, a precursor on the node); ``predicted`` ones were preceded by a true alert of the
    failure predictor. ``false_alarm_h`` are the times of alerts no failure followed.
    ``repair_h`` is each event's own repair time where the trace records one (NaN: unknown, the
    job's ``repair_h`` is used). ``fleet_source`` says where ``fleet_nodes`` came from (the fleet
    model's ``nodes`` / ``inventory`` / ``failing_nodes``, an ``override``, or the trace itself).
    """

    t_h: np.ndarray
    node: np.ndarray
    hardware: np.ndarray
    warned: np.ndarray
    predicted: np.ndarray
    span_h: float
    fleet_nodes: int
    gpus_per_node: int = 8
    false_alarm_h: np.ndarray = field(default_factory=lambda: np.zeros(0))
    cause: tuple[str, ...] = ()
    start: datetime | None = None
    source: str = "memory"
    repair_h: np.ndarray | None = None
    fleet_source: str = "trace"

    def __post_init__(self) -> None:
        n = len(self.t_h)
        for name in ("node", "hardware", "warned", "predicted"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"trace column {name} does not have {n} rows")
        if self.repair_h is not None and len(self.repair_h) != n:
            raise ValueError(f"trace column repair_h does not have {n} rows")
        if n and np.any(np.diff(self.t_h) < 0):
            raise ValueError("trace times must be sorted")

    @property
    def n_events(self) -> int:
        return len(self.t_h)

    @property
    def mtbf_h(self) -> float:
        return self.span_h / self.n_events if self.n_events else math.inf

    def subset(self, mask: np.ndarray) -> Trace:
        cause = tuple(c for c, m in zip(self.cause, mask, strict=True) if m) if self.cause else ()
        return replace(
            self,
            t_h=self.t_h[mask],
            node=self.node[mask],
            hardware=self.hardware[mask],
            warned=self.warned[mask],
            predicted=self.predicted[mask],
            cause=cause,
            repair_h=None if self.repair_h is None else self.repair_h[mask],
        )

    def take(self, idx: np.ndarray, t_h: np.ndarray, false_alarm_h: np.ndarray) -> Trace:
        """The events at positions ``idx``, moved to the (sorted) times ``t_h``."""
        return replace(
            self,
            t_h=t_h,
            false_alarm_h=false_alarm_h,
            node=self.node[idx],
            hardware=self.hardware[idx],
            warned=self.warned[idx],
            predicted=self.predicted[idx],
            cause=(),
            repair_h=None if self.repair_h is None else self.repair_h[idx],
        )

    def in_window(self) -> Trace:
        """The events inside ``[0, span_h)``: anything outside the window is not replayed."""
        inside = (self.t_h >= 0) & (self.t_h < self.span_h)
        fa = self.false_alarm_h
        fa = fa[(fa >= 0) & (fa < self.span_h)]
        if inside.all() and len(fa) == len(self.false_alarm_h):
            return self
        return replace(self.subset(inside), false_alarm_h=fa)

    def repairs(self, default_h: float) -> np.ndarray:
        """Each event's repair time in hours, ``default_h`` where the trace has none."""
        if self.repair_h is None:
            return np.full(self.n_events, float(default_h))
        r = np.asarray(self.repair_h, dtype=float)
        return np.where(np.isfinite(r) & (r >= 0), r, float(default_h))


@dataclass(frozen=True)
class JobSpec:
    """The job replayed over the trace, and the costs of its recovery machinery.

    ``gpus=None`` means the job spans the whole fleet of the trace.
    """

    gpus: int | None = None
    # None: the trace's (its fleet model); an H100 HGX node has 8 (Llama 3: 16,384 on 2,048, A1)
    gpus_per_node: int | None = None
    planned_h: float | None = None  # None: the whole trace window
    step_time_s: float = 10.0  # [assumed] large-model training step
    interval_min: float = 30.0  # checkpoint interval; Check-N-Run default 30 min (B2) [S]
    checkpoint_write_s: float = 60.0  # [assumed] sharded multi-TB write to a parallel FS
    checkpoint_async: bool = False  # async: only snapshot_s blocks, the write persists behind
    snapshot_s: float = 2.0  # [assumed] GPU->host copy of a two-stage checkpoint (MegaScale, B2)
    restore_s: float = 120.0  # [assumed] reading the checkpoint back from storage
    restart_s: float = 600.0  # requeue + init + NCCL setup: Meta u0 5-20 min (A2) [S]
    repair_h: float = 2.2  # node recovery time in the Delta spare analysis (A4) [S]
    # one replacement model for every strategy: "instant" (the scheduler hands a healthy node at
    # once, Meta's ETTR model) or "pool" (a failed node goes to repair for its own repair time,
    # or repair_h; the job takes a node from the pool - idle fleet nodes plus any hot spares -
    # and waits for a repaired one when it is empty)
    replacement: str = "instant"
    pool_nodes: int | None = None  # idle fleet nodes in the pool; None: the fleet beyond the job
    usd_per_gpu_h: float = 2.5  # [assumed] H100 rental price
    # in-memory checkpointing (Gemini, B2): frequent cheap snapshots to peer CPU memory
    mem_interval_s: float = 60.0  # [assumed]; ByteRobust snapshots every step (A3)
    mem_write_s: float = 0.5  # <0.9% overhead for every-step in-memory checkpoints (A3) [S]
    mem_restore_s: float = 30.0  # Gemini >13x faster recovery than from storage (B2) [S]
    buddy_window_s: float = 600.0  # [assumed] a buddy failing this close loses both copies
    # hot spares
    spares: int | None = None  # None: ByteRobust's P99 sizing, 4 per 1,024 nodes (A3) [S]
    spare_swap_s: float = 300.0  # Crusoe AutoClusters replace a node in <5 min (B2) [P vendor]
    # elastic training (Oobleck / ElasWave, B2)
    reconfig_s: float = 60.0  # [assumed] re-plan + reshard; communicator rebuild alone <1 s
    # live migration (TrainMover, B2)
    migrate_s: float = 20.0  # ~20 s downtime at 1,024 GPUs (TrainMover v3) [P]
    # predictive drain
    alert_threshold: float = 0.5  # predictions with score >= this are alerts
    mtbf_h: float | None = None  # young-daly: None = the trace's own MTBF

    def with_(self, **changes: Any) -> JobSpec:
        return replace(self, **changes)

    def n_gpus(self, trace: Trace) -> int:
        return self.gpus if self.gpus is not None else trace.fleet_nodes * trace.gpus_per_node

    def gpn(self, trace: Trace) -> int:
        """GPUs per node: the job's own, else the trace's fleet's."""
        return int(self.gpus_per_node or trace.gpus_per_node or 8)

    def n_nodes(self, trace: Trace) -> int:
        return max(1, math.ceil(self.n_gpus(trace) / self.gpn(trace)))

    def n_spares(self, trace: Trace) -> int:
        if self.spares is not None:
            return int(self.spares)
        return max(1, math.ceil(self.n_nodes(trace) * 4 / 1024))


JOB_FIELDS: dict[str, type] = {f.name: f.type for f in fields(JobSpec)}  # type: ignore[misc]


def young_interval(write: float, mtbf: float) -> float:
    """Young (1974): tau = sqrt(2 delta M); any time unit, the same for both arguments."""
    return math.sqrt(2.0 * write * mtbf)


def daly_interval(write: float, mtbf: float) -> float:
    """Daly (2006) higher-order optimum compute time between checkpoints (same unit in and out)."""
    if not math.isfinite(mtbf):
        return math.inf
    if write >= 2.0 * mtbf:
        return mtbf
    x = write / (2.0 * mtbf)
    return math.sqrt(2.0 * write * mtbf) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - write


def daly_ettr(interval: float, write: float, restart: float, mtbf: float) -> float:
    """Expected ETTR of Daly's model (exponential failures, failures also during restart/write).

    Wall time per unit of work is M e^{R/M} (e^{(tau+delta)/M} - 1) / tau.
    """
    wall = mtbf * math.exp(restart / mtbf) * math.expm1((interval + write) / mtbf)
    return interval / wall


def meta_ettr(
    n_nodes: int, rf_per_node_day: float, u0_h: float, interval_h: float, write_h: float
) -> float:
    """Meta's first-order estimate (Kokolis et al., A2): (1 - N r_f (u0 + dt/2)) / (1 + w/dt)."""
    rate_h = n_nodes * rf_per_node_day / 24.0
    return (1.0 - rate_h * (u0_h + interval_h / 2.0)) / (1.0 + write_h / interval_h)

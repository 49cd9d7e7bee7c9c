"""Recovery strategies: small objects behind one interface, registered by name in an explicit dict.

A strategy is a point on four axes: how often it checkpoints (a fixed interval, or Young/Daly from
the trace's MTBF), where snapshots live (storage, or peer memory with storage as the fallback), what
happens to a failed node (the scheduler hands a healthy one, a hot-spare pool, elastic downscaling)
and what it does with a warning (nothing, live migration, predictive drain). Each registered name
sets one axis; a combination ``a+b`` sets several (``hot-spares+in-memory``).

``Strategy.plan(trace, job)`` turns a trace into the events the job sees and their costs
(``replay.engine.Plan``).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum

import numpy as np

from faultlens.ingest.errors import ConfigError
from faultlens.replay.engine import DURABLE, FINE, KEEP, NEVER_H, STEP, Part, Plan
from faultlens.replay.model import JobSpec, Trace, daly_interval

H = 1.0 / 3600.0  # hours per second


class Interval(StrEnum):
    """How often the job checkpoints."""

    FIXED = "fixed"  # every --interval-min
    YOUNG_DALY = "young-daly"  # Daly's optimum for the trace's (or --mtbf-h) MTBF


class Ckpt(StrEnum):
    """Where snapshots live."""

    STORAGE = "storage"
    IN_MEMORY = "in-memory"  # peer CPU memory, storage as the fallback (Gemini)


class NodeMode(StrEnum):
    """What happens to a failed node."""

    SCHEDULER = "scheduler"  # the scheduler hands a healthy node
    SPARES = "spares"  # a hot-spare pool
    ELASTIC = "elastic"  # continue on fewer nodes


class OnWarning(StrEnum):
    """What the job does with a warning."""

    NONE = "none"
    MIGRATE = "migrate"  # live migration of warned events (TrainMover)
    DRAIN = "drain"  # checkpoint and requeue on a predictor alert


class Replacement(StrEnum):
    """The one replacement model of every strategy (``JobSpec.replacement``)."""

    INSTANT = "instant"
    POOL = "pool"


REPLACEMENTS = tuple(r.value for r in Replacement)


@dataclass(frozen=True)
class Strategy:
    name: str
    interval: Interval = Interval.FIXED
    ckpt: Ckpt = Ckpt.STORAGE
    node: NodeMode = NodeMode.SCHEDULER
    warning: OnWarning = OnWarning.NONE

    def axes(self) -> dict[str, StrEnum]:
        return {k: getattr(self, k) for k, v in DEFAULTS.items() if getattr(self, k) != v}

    def storage_interval_h(self, trace: Trace, job: JobSpec, write_h: float) -> float:
        if self.interval is Interval.YOUNG_DALY:
            mtbf = job.mtbf_h if job.mtbf_h is not None else trace.mtbf_h
            tau = daly_interval(write_h, mtbf)
            return min(tau, NEVER_H)
        return job.interval_min / 60.0 if job.interval_min > 0 else NEVER_H

    def plan(self, trace: Trace, job: JobSpec) -> Plan:
        return _build_plan(self, trace, job)


DEFAULTS: dict[str, StrEnum] = {f.name: f.default for f in fields(Strategy) if f.name != "name"}

# The registry: adding a strategy is one entry (a name and the axes it sets).
STRATEGIES: dict[str, Strategy] = {
    "checkpoint": Strategy("checkpoint"),
    "young-daly": Strategy("young-daly", interval=Interval.YOUNG_DALY),
    "in-memory": Strategy("in-memory", ckpt=Ckpt.IN_MEMORY),
    "hot-spares": Strategy("hot-spares", node=NodeMode.SPARES),
    "elastic": Strategy("elastic", node=NodeMode.ELASTIC),
    "live-migration": Strategy("live-migration", warning=OnWarning.MIGRATE),
    "predictive-drain": Strategy("predictive-drain", warning=OnWarning.DRAIN),
}
ALL_STRATEGIES: tuple[str, ...] = tuple(STRATEGIES)
DEMO_STRATEGIES: tuple[str, ...] = (*ALL_STRATEGIES, "hot-spares+in-memory")


def resolve(name: str) -> Strategy:
    """A registered strategy, or a combination ``a+b`` of registered ones."""
    parts = [p.strip() for p in name.split("+") if p.strip()]
    if not parts:
        raise ConfigError("empty strategy name")
    axes: dict[str, StrEnum] = {}
    for part in parts:
        if part not in STRATEGIES:
            raise ConfigError(f"unknown strategy {part!r}; known: {', '.join(STRATEGIES)}")
        for axis, value in STRATEGIES[part].axes().items():
            if axes.get(axis, value) != value:
                raise ConfigError(f"strategies in {name!r} disagree on {axis}")
            axes[axis] = value
    return replace(Strategy("+".join(parts)), **axes)


def buddy_lost(trace: Trace, window_h: float) -> np.ndarray:
    """Hardware events whose buddy node (node ^ 1) also failed within ``window_h``: both in-memory
    copies are gone and recovery falls back to storage."""
    n = trace.n_events
    lost = np.zeros(n, dtype=bool)
    hw = np.flatnonzero(trace.hardware & (trace.node >= 0))
    if len(hw) < 2:
        return lost
    pair = trace.node[hw] // 2
    order = np.lexsort((trace.t_h[hw], pair))
    idx, p, t, node = hw[order], pair[order], trace.t_h[hw][order], trace.node[hw][order]
    close = (p[1:] == p[:-1]) & (node[1:] != node[:-1]) & (t[1:] - t[:-1] <= window_h)
    lost[idx[1:][close]] = True
    lost[idx[:-1][close]] = True
    return lost


def fifo_wait(t_out: np.ndarray, spares: int, repair_h: float) -> np.ndarray:
    """Wait for a node when the pool of ``spares`` is empty; repaired nodes return FIFO."""
    wait = np.zeros(len(t_out))
    if spares < len(t_out):
        back = t_out[: len(t_out) - spares] + repair_h
        wait[spares:] = np.maximum(0.0, back - t_out[spares:])
    return wait


def pool_wait(t_out: np.ndarray, pool: int, repair_h: np.ndarray) -> np.ndarray:
    """Wait for a node from a pool of ``pool`` healthy nodes, each failed node returning after
    its own repair time (the earliest return is taken first). Equals ``fifo_wait`` when every
    repair takes as long."""
    wait = np.zeros(len(t_out))
    if len(t_out) <= pool:
        return wait
    if np.ptp(repair_h) == 0:
        return fifo_wait(t_out, pool, float(repair_h[0]))
    free, back = pool, []
    for i, (t, r) in enumerate(zip(t_out.tolist(), repair_h.tolist(), strict=True)):
        while back and back[0] <= t:
            heapq.heappop(back)
            free += 1
        heapq.heappush(back, t + r)  # the failed node goes to repair (with no pool: its own)
        if free > 0:
            free -= 1
        else:
            wait[i] = heapq.heappop(back) - t
    return wait


@dataclass
class _Build:
    """What the axis functions share while a plan is built."""

    trace: Trace
    job: JobSpec
    plan: Plan
    block_h: float
    restore_ok: float
    instant: bool
    needs_node: np.ndarray
    extra: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=list)

    def add_events(self, t: np.ndarray, part: list[float], counts: bool) -> None:
        """Extra events (false alarms, returning nodes) with one down plan each."""
        n = len(t)
        self.extra.append(
            (
                t,
                np.tile(part, (n, 1)),
                np.full(n, KEEP, dtype=np.int8),
                np.full(n, counts, dtype=bool),
            )
        )


def _build_plan(s: Strategy, trace: Trace, job: JobSpec) -> Plan:
    if job.replacement not in REPLACEMENTS:
        raise ConfigError(f"--replacement is one of {', '.join(REPLACEMENTS)}")
    n = trace.n_events
    plan = Plan(
        t=trace.t_h.astype(float),
        parts=np.zeros((n, len(Part))),
        mode=np.full(n, DURABLE, dtype=np.int8),
        counts=np.ones(n, dtype=bool),
        tau_h=0.0,
        write_h=0.0,
        every_n=1,
        persist_h=0.0,
        step_h=job.step_time_s * H,
        n_nodes=job.n_nodes(trace),
    )
    plan.parts[:, Part.RESTART] = job.restart_s * H
    block_h = (job.snapshot_s if job.checkpoint_async else job.checkpoint_write_s) * H
    restore_ok = CKPT_AXIS[s.ckpt](s, trace, job, plan, block_h)
    migrated = trace.warned & (s.warning is OnWarning.MIGRATE)
    needs_node = trace.hardware.astype(bool) & ~migrated
    instant = job.replacement == Replacement.INSTANT
    plan.repair_h = 0.0 if instant else job.repair_h
    plan.needs_node, plan.instant = needs_node.copy(), instant
    plan.event_repair_h = np.zeros(n) if instant else trace.repairs(job.repair_h)
    b = _Build(trace, job, plan, block_h, restore_ok, instant, needs_node)
    NODE_AXIS[s.node](b)
    WARNING_AXIS[s.warning](b)
    if b.extra:
        ts, parts, modes, counts = (list(x) for x in zip(*b.extra, strict=True))
        _merge(plan, ts, parts, modes, counts)
    return plan


# -- the checkpoint axis: sets the cycle and the restore part; returns the normal restore ----------
def _ckpt_storage(s: Strategy, trace: Trace, job: JobSpec, plan: Plan, block_h: float) -> float:
    plan.tau_h = s.storage_interval_h(trace, job, block_h)
    plan.write_h, plan.every_n = block_h, 1
    plan.persist_h = job.checkpoint_write_s * H if job.checkpoint_async else 0.0
    plan.parts[:, Part.RESTORE] = job.restore_s * H
    return job.restore_s * H


def _ckpt_in_memory(s: Strategy, trace: Trace, job: JobSpec, plan: Plan, block_h: float) -> float:
    storage_tau = s.storage_interval_h(trace, job, block_h)
    plan.tau_h, plan.write_h = job.mem_interval_s * H, job.mem_write_s * H
    plan.every_n = max(1, round(storage_tau / (plan.tau_h + plan.write_h)))
    plan.persist_h = job.checkpoint_write_s * H  # the storage copy is written from memory, async
    mem_ok = ~buddy_lost(trace, job.buddy_window_s * H)
    restore_ok = job.mem_restore_s * H
    plan.parts[:, Part.RESTORE] = np.where(mem_ok, restore_ok, job.restore_s * H)
    plan.mode[mem_ok] = FINE
    return restore_ok


# -- the node axis: what a failed node costs -------------------------------------------------------
def _repairs(b: _Build) -> np.ndarray:
    return b.trace.repairs(b.job.repair_h)[b.needs_node]


def _node_scheduler(b: _Build) -> None:
    if not b.instant:  # the scheduler's pool: the idle fleet nodes
        t = b.plan.t[b.needs_node]
        b.plan.parts[b.needs_node, Part.WAIT] = pool_wait(
            t, int(b.job.pool_nodes or 0), _repairs(b)
        )


def _node_spares(b: _Build) -> None:
    k = b.job.n_spares(b.trace)
    out_t = b.plan.t[b.needs_node]
    if not b.instant:
        pool = k + int(b.job.pool_nodes or 0)
        b.plan.parts[b.needs_node, Part.WAIT] = pool_wait(out_t, pool, _repairs(b))
    b.plan.parts[b.needs_node, Part.RESTART] = b.job.spare_swap_s * H
    b.plan.spare_nodes, b.plan.spare_out_t = k, out_t
    b.plan.spare_out_r = np.zeros(len(out_t)) if b.instant else _repairs(b)


def _node_elastic(b: _Build) -> None:
    plan, nn = b.plan, b.needs_node
    plan.parts[nn, Part.RESTART] = b.job.reconfig_s * H
    plan.parts[nn, Part.RESTORE] = 0.0
    plan.mode[nn] = STEP
    plan.out_t = plan.t[nn]
    # the job runs short of a node until one comes back: at once with instant replacement,
    # else from the pool (idle fleet nodes) when it has one, or when a repaired node returns
    pool = int(b.job.pool_nodes or 0)
    plan.out_r = np.zeros(int(nn.sum())) if b.instant else pool_wait(plan.out_t, pool, _repairs(b))
    back = np.sort(plan.out_t + plan.out_r)
    back = back[back < b.trace.span_h]
    b.add_events(back, [0.0, 0.0, b.job.reconfig_s * H, 0.0], counts=False)


# -- the warning axis: what the job does before a warned or predicted event -----------------
def _warn_none(b: _Build) -> None:
    return None


def _warn_migrate(b: _Build) -> None:
    migrated = b.trace.warned.astype(bool)
    if migrated.any():  # live migration moves the job in seconds
        b.plan.parts[migrated] = (0.0, 0.0, b.job.migrate_s * H, 0.0)
        b.plan.mode[migrated] = KEEP


def _warn_drain(b: _Build) -> None:
    drained = b.trace.predicted.astype(bool)
    if drained.any():  # a drain checkpoints and requeues
        b.plan.parts[drained, Part.SAVE] = b.block_h
        b.plan.mode[drained] = KEEP
    if len(b.trace.false_alarm_h):
        part = [b.block_h, 0.0, b.job.restart_s * H, b.restore_ok]
        b.add_events(b.trace.false_alarm_h.astype(float), part, counts=True)


CKPT_AXIS: dict[Ckpt, Callable[[Strategy, Trace, JobSpec, Plan, float], float]] = {
    Ckpt.STORAGE: _ckpt_storage,
    Ckpt.IN_MEMORY: _ckpt_in_memory,
}
NODE_AXIS: dict[NodeMode, Callable[[_Build], None]] = {
    NodeMode.SCHEDULER: _node_scheduler,
    NodeMode.SPARES: _node_spares,
    NodeMode.ELASTIC: _node_elastic,
}
WARNING_AXIS: dict[OnWarning, Callable[[_Build], None]] = {
    OnWarning.NONE: _warn_none,
    OnWarning.MIGRATE: _warn_migrate,
    OnWarning.DRAIN: _warn_drain,
}


def _merge(plan: Plan, ts: list, parts: list, modes: list, counts: list) -> None:
    t = np.concatenate([plan.t, *ts])
    order = _merge_order(plan.t, ts)
    plan.t = t[order]
    plan.parts = np.concatenate([plan.parts, *parts])[order]
    plan.mode = np.concatenate([plan.mode, *modes])[order]
    plan.counts = np.concatenate([plan.counts, *counts])[order]
    extra = np.zeros(sum(len(x) for x in ts), dtype=bool)
    plan.needs_node = np.concatenate([plan.needs_node, extra])[order]
    if plan.event_repair_h is not None:
        plan.event_repair_h = np.concatenate([plan.event_repair_h, extra.astype(float)])[order]


def _merge_order(a: np.ndarray, ts: list) -> np.ndarray:
    """``argsort(concatenate([a, *ts]), kind="stable")``, merging sorted arrays in linear time."""
    extra = np.concatenate(ts)
    if len(ts) > 1 or np.any(np.diff(extra) < 0):
        sub = np.argsort(extra, kind="stable")
    else:
        sub = np.arange(len(extra))
    if np.any(np.diff(a) < 0):
        return np.argsort(np.concatenate([a, extra]), kind="stable")
    b = extra[sub]
    n, m = len(a), len(b)
    order = np.empty(n + m, dtype=np.intp)
    order[np.arange(n) + np.searchsorted(b, a, side="left")] = np.arange(n)
    order[np.arange(m) + np.searchsorted(a, b, side="right")] = n + sub
    return order

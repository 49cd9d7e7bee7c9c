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
from dataclasses import dataclass, replace

import numpy as np

from faultlens.ingest.errors import ConfigError
from faultlens.replay.engine import DURABLE, FINE, KEEP, NEVER_H, STEP, Plan
from faultlens.replay.model import JobSpec, Trace, daly_interval

H = 1.0 / 3600.0  # hours per second
REPLACEMENTS = ("instant", "pool")

DEFAULTS = {"interval": "fixed", "ckpt": "storage", "node": "scheduler", "warning": "none"}


@dataclass(frozen=True)
class Strategy:
    name: str
    interval: str = "fixed"  # fixed | young-daly
    ckpt: str = "storage"  # storage | in-memory
    node: str = "scheduler"  # scheduler | spares | elastic
    warning: str = "none"  # none | migrate | drain

    def axes(self) -> dict[str, str]:
        return {k: getattr(self, k) for k in DEFAULTS if getattr(self, k) != DEFAULTS[k]}

    def storage_interval_h(self, trace: Trace, job: JobSpec, write_h: float) -> float:
        if self.interval == "young-daly":
            mtbf = job.mtbf_h if job.mtbf_h is not None else trace.mtbf_h
            tau = daly_interval(write_h, mtbf)
            return min(tau, NEVER_H)
        return job.interval_min / 60.0 if job.interval_min > 0 else NEVER_H

    def plan(self, trace: Trace, job: JobSpec) -> Plan:
        return _build_plan(self, trace, job)


STRATEGIES: dict[str, Strategy] = {
    "checkpoint": Strategy("checkpoint"),
    "young-daly": Strategy("young-daly", interval="young-daly"),
    "in-memory": Strategy("in-memory", ckpt="in-memory"),
    "hot-spares": Strategy("hot-spares", node="spares"),
    "elastic": Strategy("elastic", node="elastic"),
    "live-migration": Strategy("live-migration", warning="migrate"),
    "predictive-drain": Strategy("predictive-drain", warning="drain"),
}


def resolve(name: str) -> Strategy:
    """A registered strategy, or a combination ``a+b`` of registered ones."""
    parts = [p.strip() for p in name.split("+") if p.strip()]
    if not parts:
        raise ConfigError("empty strategy name")
    axes: dict[str, str] = {}
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
        if free > 0:
            free -= 1
        else:
            wait[i] = heapq.heappop(back) - t
        heapq.heappush(back, t + r)
    return wait


def _build_plan(s: Strategy, trace: Trace, job: JobSpec) -> Plan:
    if job.replacement not in REPLACEMENTS:
        raise ConfigError(f"--replacement is one of {', '.join(REPLACEMENTS)}")
    instant = job.replacement == "instant"
    n = trace.n_events
    t = trace.t_h.astype(float)
    hw = trace.hardware.astype(bool)
    if job.checkpoint_async:
        block_h, persist_h = job.snapshot_s * H, job.checkpoint_write_s * H
    else:
        block_h, persist_h = job.checkpoint_write_s * H, 0.0
    storage_tau = s.storage_interval_h(trace, job, block_h)
    parts = np.zeros((n, 4))
    parts[:, 2] = job.restart_s * H
    mode = np.full(n, DURABLE, dtype=np.int8)
    if s.ckpt == "in-memory":
        tau, write = job.mem_interval_s * H, job.mem_write_s * H
        every_n = max(1, round(storage_tau / (tau + write)))
        persist_h = job.checkpoint_write_s * H  # the storage copy is written from memory, async
        mem_ok = ~buddy_lost(trace, job.buddy_window_s * H)
        restore_ok = job.mem_restore_s * H
        parts[:, 3] = np.where(mem_ok, restore_ok, job.restore_s * H)
        mode[mem_ok] = FINE
    else:
        tau, write, every_n = storage_tau, block_h, 1
        restore_ok = job.restore_s * H
        parts[:, 3] = restore_ok
    # warnings: live migration moves the job in seconds; a drain checkpoints and requeues
    migrated = trace.warned & (s.warning == "migrate")
    drained = trace.predicted & (s.warning == "drain")
    needs_node = hw & ~migrated
    n_nodes = job.n_nodes(trace)
    plan = Plan(
        t=t,
        parts=parts,
        mode=mode,
        counts=np.ones(n, dtype=bool),
        tau_h=tau,
        write_h=write,
        every_n=every_n,
        persist_h=persist_h,
        step_h=job.step_time_s * H,
        n_nodes=n_nodes,
        repair_h=0.0 if instant else job.repair_h,
        needs_node=needs_node.copy(),
        instant=instant,
    )
    repairs = trace.repairs(job.repair_h)[needs_node]
    idle = int(job.pool_nodes or 0)
    if s.node == "spares":
        k = job.n_spares(trace)
        out_t = t[needs_node]
        if not instant:
            parts[needs_node, 1] = pool_wait(out_t, k + idle, repairs)
        parts[needs_node, 2] = job.spare_swap_s * H
        plan.spare_nodes, plan.spare_out_t = k, out_t
    elif s.node == "elastic":
        parts[needs_node, 2] = job.reconfig_s * H
        parts[needs_node, 3] = 0.0
        mode[needs_node] = STEP
        plan.out_t = t[needs_node]
        plan.out_r = np.zeros(len(repairs)) if instant else repairs
    elif not instant:  # the scheduler's pool: the idle fleet nodes
        parts[needs_node, 1] = pool_wait(t[needs_node], idle, repairs)
    if drained.any():
        parts[drained, 0] = block_h
        mode[drained] = KEEP
    if migrated.any():
        parts[migrated] = (0.0, 0.0, job.migrate_s * H, 0.0)
        mode[migrated] = KEEP
    extra_t, extra_parts, extra_mode, extra_counts = [], [], [], []
    if s.warning == "drain" and len(trace.false_alarm_h):
        fa = trace.false_alarm_h.astype(float)
        extra_t.append(fa)
        extra_parts.append(np.tile([block_h, 0.0, job.restart_s * H, restore_ok], (len(fa), 1)))
        extra_mode.append(np.full(len(fa), KEEP, dtype=np.int8))
        extra_counts.append(np.ones(len(fa), dtype=bool))
    if s.node == "elastic" and plan.out_t is not None:
        back = np.sort(plan.out_t + plan.out_r)
        back = back[back < trace.span_h]
        extra_t.append(back)
        extra_parts.append(np.tile([0.0, 0.0, job.reconfig_s * H, 0.0], (len(back), 1)))
        extra_mode.append(np.full(len(back), KEEP, dtype=np.int8))
        extra_counts.append(np.zeros(len(back), dtype=bool))
    if extra_t:
        _merge(plan, extra_t, extra_parts, extra_mode, extra_counts)

    return plan


def _merge(plan: Plan, ts: list, parts: list, modes: list, counts: list) -> None:
    t = np.concatenate([plan.t, *ts])
    order = _merge_order(plan.t, ts)
    plan.t = t[order]
    plan.parts = np.concatenate([plan.parts, *parts])[order]
    plan.mode = np.concatenate([plan.mode, *modes])[order]
    plan.counts = np.concatenate([plan.counts, *counts])[order]
    extra = np.zeros(sum(len(x) for x in ts), dtype=bool)
    plan.needs_node = np.concatenate([plan.needs_node, extra])[order]


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

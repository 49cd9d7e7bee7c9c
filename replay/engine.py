"""The vectorized replay core: one closed-form accounting per interruption gap, in numpy.

The model (the SimPy baseline in ``replay.des`` simulates exactly this, event by event):

* The job holds the whole window ``[0, W)``. Each event ``i`` at ``t_i`` starts a *down plan* of
  consecutive parts ``[checkpoint_save, wait_node, restart, restore]`` (hours). An event arriving
  while the job is still down replaces the current plan if its own plan ends no earlier
  (``t_i + D_i >= end``: Daly's "a failure during restart restarts the restart"), otherwise it is
  absorbed. So ``end_i = max(end_{i-1}, t_i + D_i)``, a cumulative maximum.
* Between the end of a down plan and the next event the job runs, in cycles of ``tau`` compute and
  ``w`` blocking snapshot. Every ``every_n``-th snapshot is durable ``persist`` after it ends.
* When a run ends in an event, the work since a rollback point ``P`` is lost: ``KEEP`` (no loss:
  live migration, a drain, the end of the window), ``FINE`` (the last snapshot: in-memory
  recovery), ``DURABLE`` (the last durable checkpoint), ``STEP`` (the step in flight, at most the
  compute since the last snapshot: elastic).
  Every restart begins a new checkpoint schedule from a durable state.
* Elastic runs lose capacity while nodes are out for repair: each run's save / lost / productive
  time is scaled by its mean capacity ``1 - int(m dt) / (N r)`` and the rest is reduced throughput.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from faultlens.replay.model import Badput

KEEP, FINE, DURABLE, STEP = 0, 1, 2, 3


class Part(IntEnum):
    """The columns of ``Plan.parts``: the consecutive parts of a down plan."""

    SAVE = 0
    WAIT = 1
    RESTART = 2
    RESTORE = 3


PARTS: tuple[Badput, ...] = (
    Badput.CHECKPOINT_SAVE,
    Badput.WAIT_NODE,
    Badput.RESTART,
    Badput.RESTORE,
)  # the bucket of each Part
NEVER_H = 1e15  # an interval that never elapses (no checkpoints)


@dataclass
class Plan:
    """What one strategy makes of one trace: the events the job sees and how it checkpoints."""

    t: np.ndarray  # event times, hours, sorted
    parts: np.ndarray  # (n, 4) hours of each ``Part``: save, wait, restart, restore
    mode: np.ndarray  # rollback of the run that this event ends (KEEP/FINE/DURABLE/STEP)
    counts: np.ndarray  # bool: the event is an interruption (not an elastic scale-back)
    tau_h: float
    write_h: float
    every_n: int
    persist_h: float
    step_h: float
    n_nodes: int
    out_t: np.ndarray | None = None  # elastic: times nodes went out for repair
    repair_h: float = 0.0
    out_r: np.ndarray | None = None  # elastic: hours each outage runs short (default repair_h)
    instant: bool = False  # replacement "instant": no node is ever waited for
    spare_nodes: int = 0  # hot spares: pool size (for idle accounting)
    spare_out_t: np.ndarray | None = None  # nodes taken from the pool (each out repair_h)
    spare_out_r: np.ndarray | None = None  # their own repair hours (default repair_h)
    event_repair_h: np.ndarray | None = None  # each event's own repair hours (0: instant)
    needs_node: np.ndarray | None = None  # bool: the event sends a node to repair


@dataclass
class Timeline:
    """The parameter-independent part of an accounting: down periods and runs."""

    down: dict[Badput, float]
    runs: np.ndarray  # run lengths, hours (n + 1: before the first event ... after the last)
    run_start: np.ndarray
    end_mode: np.ndarray
    restarts: int
    groups: dict[int, tuple[np.ndarray, np.ndarray | None]]  # mode -> (runs, capacity kept)
    reduced: float  # job-hours of reduced throughput (elastic)
    spare_idle: float  # node-hours of idle hot spares


def timeline(plan: Plan, span_h: float, full: bool = True) -> Timeline:
    """Down periods and runs of ``plan``; ``full=False`` skips what only the badput needs (down
    parts, restarts, idle spares): enough for ``productive_many``."""
    t, parts = plan.t, plan.parts
    n = len(t)
    down = {b: 0.0 for b in PARTS}
    if n == 0:
        return _finish(
            plan,
            span_h,
            down,
            np.array([span_h]),
            np.zeros(1),
            np.array([KEEP], dtype=np.int8),
            0,
            full,
        )
    v = t + parts.sum(axis=1)
    end = np.maximum.accumulate(v)
    t_next = np.empty(n)
    t_next[:-1] = t[1:]
    t_next[-1] = span_h
    gap_down = np.minimum(end, t_next) - t
    restarts = 0
    if full:
        prev = np.empty(n)
        prev[0] = -np.inf
        prev[1:] = end[:-1]
        own = v >= prev
        _down_totals(t, parts, v, own, t_next, gap_down, down)
        restarts = int(np.count_nonzero(own & plan.counts))
    run_start = np.empty(n + 1)
    run_start[0] = 0.0
    run_start[1:] = t + gap_down
    runs = np.empty(n + 1)
    runs[:-1] = t
    runs[-1] = span_h
    runs -= run_start
    end_mode = np.empty(n + 1, dtype=np.int8)
    end_mode[:-1] = plan.mode
    end_mode[-1] = KEEP
    return _finish(plan, span_h, down, runs, run_start, end_mode, restarts, full)


def _down_totals(
    t: np.ndarray,
    parts: np.ndarray,
    v: np.ndarray,
    own: np.ndarray,
    t_next: np.ndarray,
    gap_down: np.ndarray,
    down: dict[Badput, float],
) -> None:
    """Hours spent in each part of the down plans (cut short by a later plan or the window)."""
    # most plans start and finish inside their own gap; only the rest need the overlap arithmetic
    simple = own & (v <= t_next)
    totals = (parts * simple[:, None]).sum(axis=0)  # not `@`: threaded BLAS stalls a busy host
    rest = np.flatnonzero(~simple)
    if len(rest):
        active = np.maximum.accumulate(np.where(own, np.arange(len(t)), 0))[rest]
        o0 = t[rest] - t[active]
        o1 = o0 + gap_down[rest]
        p = parts[active]
        hi = np.cumsum(p, axis=1)
        lo = hi - p
        share = np.clip(o1[:, None], lo, hi) - np.clip(o0[:, None], lo, hi)
        totals = totals + share.sum(axis=0)
    for k, b in enumerate(PARTS):
        down[b] = float(totals[k])


def _finish(
    plan: Plan,
    span_h: float,
    down: dict[Badput, float],
    runs: np.ndarray,
    run_start: np.ndarray,
    end_mode: np.ndarray,
    restarts: int,
    full: bool = True,
) -> Timeline:
    frac = _out_frac(plan, run_start, runs)
    keep = None if frac is None else 1.0 - frac
    groups = _groups(end_mode, runs, keep)
    reduced = 0.0 if frac is None else float((runs * frac).sum())
    idle = spare_idle_node_h(plan, span_h) if full else 0.0
    return Timeline(down, runs, run_start, end_mode, restarts, groups, reduced, idle)


def _groups(
    end_mode: np.ndarray, runs: np.ndarray, keep: np.ndarray | None
) -> dict[int, tuple[np.ndarray, np.ndarray | None]]:
    """Runs (and capacity kept) by the rollback mode of the event that ends them."""
    present = np.bincount(end_mode, minlength=4)
    modes = np.flatnonzero(present)
    last = int(end_mode[-1])
    if len(modes) <= 2 and present[last] == 1 and len(end_mode) > 1:
        # one mode for every event, and the window's end: slices, no masks
        before = [int(m) for m in modes if m != last]
        out = {last: (runs[-1:], None if keep is None else keep[-1:])}
        if before:
            out[before[0]] = (runs[:-1], None if keep is None else keep[:-1])
        return out
    groups: dict[int, tuple[np.ndarray, np.ndarray | None]] = {}
    for mode in modes:
        if present[mode] == len(end_mode):
            return {int(mode): (runs, keep)}
        sel = end_mode == mode
        groups[int(mode)] = (runs[sel], None if keep is None else keep[sel])
    return groups


def _out_frac(plan: Plan, run_start: np.ndarray, runs: np.ndarray) -> np.ndarray | None:
    if plan.out_t is None or len(plan.out_t) == 0:
        return None
    out_h = capacity_loss(plan, run_start, run_start + runs)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(runs > 0, np.clip(out_h / (plan.n_nodes * runs), 0.0, 1.0), 0.0)


def capacity_loss(plan: Plan, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Node-hours out for repair inside each ``[start, end]`` (elastic)."""
    if plan.out_t is None or len(plan.out_t) == 0:
        return np.zeros_like(start)
    s = plan.out_t
    rep = plan.out_r if plan.out_r is not None else np.full(len(s), plan.repair_h)
    back = np.sort(s + rep)
    cum_s = np.concatenate(([0.0], np.cumsum(s)))
    cum_b = np.concatenate(([0.0], np.cumsum(back)))

    def g(x: np.ndarray) -> np.ndarray:
        # node-hours out before x: sum over outages of clip(x - s_i, 0, r_i)
        c2 = np.searchsorted(s, x, side="right")
        c1 = np.searchsorted(back, x, side="right")
        return (x * c2 - cum_s[c2]) - (x * c1 - cum_b[c1])

    return g(end) - g(start)


def spare_idle_node_h(plan: Plan, span_h: float) -> float:
    """Node-hours the hot-spare pool sat healthy and idle."""
    k = plan.spare_nodes
    if k <= 0:
        return 0.0
    s = plan.spare_out_t if plan.spare_out_t is not None else np.zeros(0)
    rep = plan.spare_out_r if plan.spare_out_r is not None else plan.repair_h
    times = np.concatenate((s, s + rep, [span_h]))
    delta = np.concatenate((np.ones(len(s)), -np.ones(len(s)), [0.0]))
    order = np.argsort(times, kind="stable")
    times, delta = np.minimum(times[order], span_h), delta[order]
    out = np.cumsum(delta)
    edges = np.concatenate(([0.0], times))
    widths = np.diff(edges)
    out_before = np.concatenate(([0.0], out[:-1]))
    used = np.minimum(out_before, k)
    return float(k * span_h - np.sum(used * widths))


def cycle_totals(
    plan: Plan, tl: Timeline, tau: np.ndarray, every_n: np.ndarray, step: np.ndarray
) -> dict[str, np.ndarray]:
    """Save, lost and productive job-hours for several checkpoint cycles at once.

    ``tau``, ``every_n`` and ``step`` have one entry per cycle; the result arrays too. A run of
    length ``r`` holds ``k = floor(r / c)`` full cycles and a remainder ``rem``; a rollback to the
    ``j``-th snapshot loses ``rem - excess + (k - j) tau`` of compute. Many cycles over many runs
    are summed from the sorted runs' prefix sums (``_group_sorted``), otherwise run by run.
    """
    tau = np.atleast_1d(np.asarray(tau, dtype=float))
    every = np.atleast_1d(np.asarray(every_n, dtype=float))
    step = np.atleast_1d(np.asarray(step, dtype=float))
    save = np.zeros(len(tau))
    lost = np.zeros(len(tau))
    kept = np.zeros(len(tau))
    for mode, (r, keep) in tl.groups.items():
        group = _group_sorted if _sorted_pays(r, tau, plan.write_h) else _group_direct
        g_save, g_lost, g_kept = group(plan, mode, r, keep, tau, every, step)
        save += g_save
        lost += g_lost
        kept += g_kept
    return {"save": save, "lost": lost, "productive": kept - save - lost}


def _sorted_pays(r: np.ndarray, tau: np.ndarray, w: float) -> bool:
    """Whether prefix sums over the sorted runs beat the run-by-run arithmetic (cycle counts)."""
    n, m = len(r), len(tau)
    if m < 2 or n < 64 or r.min() < 0:
        return False
    cycles = r.max() / (tau.min() + w) + 3.0
    log_n = float(np.log2(n))
    return n * log_n + 4.0 * m * cycles * log_n < 8.0 * m * n


def _group_direct(
    plan: Plan,
    mode: int,
    r: np.ndarray,
    keep: np.ndarray | None,
    tau_: np.ndarray,
    every_: np.ndarray,
    step_: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Save, lost and kept of one rollback mode's runs: every run against every cycle."""
    w = plan.write_h
    tau, every, step = tau_[:, None], every_[:, None], step_[:, None]
    c = tau + w

    def total(x: np.ndarray) -> np.ndarray:
        return x.sum(axis=-1) if keep is None else (x * keep).sum(axis=-1)

    k = np.floor(r / c)
    rem = r - k * c
    exc = np.maximum(rem - tau, 0.0)
    s_exc = total(exc)
    save = w * total(k) + s_exc
    kept = np.broadcast_to(total(r), save.shape)
    lost = np.zeros(len(tau_))
    if mode == FINE:
        lost = total(rem) - s_exc
    elif mode == DURABLE:
        behind = 0.0
        if plan.persist_h > 0 or np.any(every > 1):
            j = np.floor(k / every) * every
            if plan.persist_h > 0:
                j = j - every * ((r - j * c < plan.persist_h) & (j >= every))
            behind = total(k - j) * tau_
        lost = total(rem) - s_exc + behind
    elif mode == STEP:
        lost = total(np.minimum(rem - exc, step))
    return save, lost, kept


def _group_sorted(
    plan: Plan,
    mode: int,
    r: np.ndarray,
    keep: np.ndarray | None,
    tau: np.ndarray,
    every: np.ndarray,
    step: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``_group_direct`` from weighted counts and sums of the sorted runs over the intervals
    ``[j c, j c + tau)`` (compute) and ``[j c + tau, (j + 1) c)`` (snapshot) of each cycle."""
    w = plan.write_h
    if keep is None:
        rs = np.sort(r)
        cq = np.arange(len(rs) + 1, dtype=float)
        cr = np.concatenate(([0.0], np.cumsum(rs)))
    else:
        order = np.argsort(r)
        rs = r[order]
        q = keep[order]
        cq = np.concatenate(([0.0], np.cumsum(q)))
        cr = np.concatenate(([0.0], np.cumsum(q * rs)))
    total_q, total_r = cq[-1], cr[-1]
    c = (tau + w)[:, None]
    n_cycles = int(np.ceil(rs[-1] / c.min())) + 2
    grid = np.arange(n_cycles + 1, dtype=float)[None, :]
    base = grid * c  # (cycles, J + 1): the start of cycle j
    s0 = np.searchsorted(rs, base)
    s1 = np.searchsorted(rs, base[:, :-1] + tau[:, None])
    hi = s0[:, 1:]
    k_sum = (total_q - cq[hi]).sum(axis=1)  # sum of q floor(r / c)
    exc = (cr[hi] - cr[s1]) - (base[:, :-1] + tau[:, None]) * (cq[hi] - cq[s1])
    s_exc = exc.sum(axis=1)
    save = w * k_sum + s_exc
    kept = np.full(len(tau), total_r)
    rem = total_r - c[:, 0] * k_sum  # sum of q (r - k c)
    lost = np.zeros(len(tau))
    if mode == FINE:
        lost = rem - s_exc
    elif mode == DURABLE:
        behind = 0.0
        if plan.persist_h > 0 or np.any(every > 1):
            e = every[:, None]
            durable = (np.mod(grid, e) == 0) & (grid >= 1)  # cycles ending in a durable copy
            m_sum = np.where(durable, total_q - cq[s0], 0.0).sum(axis=1)
            fresh = 0.0
            if plan.persist_h > 0:  # the newest durable copy is still being written
                top = np.searchsorted(rs, np.minimum(base + plan.persist_h, base + e * c))
                fresh = np.where(durable, cq[top] - cq[s0], 0.0).sum(axis=1)
            behind = (k_sum - every * m_sum + every * fresh) * tau
        lost = rem - s_exc + behind
    elif mode == STEP:
        a = np.minimum(tau, step)[:, None]
        lo = s0[:, :-1]
        mid = np.searchsorted(rs, base[:, :-1] + a)
        lost = (
            (cr[mid] - cr[lo]) - base[:, :-1] * (cq[mid] - cq[lo]) + a * (cq[hi] - cq[mid])
        ).sum(axis=1)
    return save, lost, kept


def productive_many(
    plan: Plan, span_h: float, tau: np.ndarray, every_n: np.ndarray, step: np.ndarray
) -> np.ndarray:
    """Productive job-hours of ``plan`` for several checkpoint cycles (no badput breakdown)."""
    return cycle_totals(plan, timeline(plan, span_h, full=False), tau, every_n, step)["productive"]


def account_many(
    plan: Plan, tl: Timeline, tau: np.ndarray, every_n: np.ndarray, step: np.ndarray
) -> list[dict[str, float]]:
    """``account`` for several checkpoint cycles over one timeline."""
    cyc = cycle_totals(plan, tl, tau, every_n, step)
    out = []
    for m in range(len(cyc["save"])):
        acc = {b.value: v for b, v in tl.down.items()}
        acc[Badput.CHECKPOINT_SAVE.value] += float(cyc["save"][m])
        acc[Badput.LOST_PROGRESS.value] = float(cyc["lost"][m])
        acc[Badput.REDUCED_THROUGHPUT.value] = tl.reduced
        acc["productive"] = float(cyc["productive"][m])
        acc["restarts"] = float(tl.restarts)
        acc["spare_idle"] = tl.spare_idle
        out.append(acc)
    return out


def account(plan: Plan, span_h: float, tl: Timeline | None = None) -> dict[str, float]:
    """Job-hours in each bucket (multiply by the job's GPUs for GPU-hours)."""
    tl = tl if tl is not None else timeline(plan, span_h)
    one = np.array([1.0])
    return account_many(plan, tl, one * plan.tau_h, one * plan.every_n, one * plan.step_h)[0]

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

import numpy as np

from replay.model import Badput

KEEP, FINE, DURABLE, STEP = 0, 1, 2, 3
PARTS: tuple[Badput, ...] = (
    Badput.CHECKPOINT_SAVE, Badput.WAIT_NODE, Badput.RESTART, Badput.RESTORE,
)
NEVER_H = 1e15  # an interval that never elapses (no checkpoints)


@dataclass
class Plan:
    """What one strategy makes of one trace: the events the job sees and how it checkpoints."""

    t: np.ndarray  # event times, hours, sorted
    parts: np.ndarray  # (n, 4) hours of [save, wait, restart, restore]
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
    spare_nodes: int = 0  # hot spares: pool size (for idle accounting)
    spare_out_t: np.ndarray | None = None  # nodes taken from the pool (each out repair_h)
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


def timeline(plan: Plan, span_h: float) -> Timeline:
    t, parts = plan.t, plan.parts
    n = len(t)
    down = {b: 0.0 for b in PARTS}
    if n == 0:
        return _finish(plan, span_h, down, np.array([span_h]), np.zeros(1),
                       np.array([KEEP], dtype=np.int8), 0)
    v = t + parts.sum(axis=1)
    end = np.maximum.accumulate(v)
    prev = np.empty(n)
    prev[0] = -np.inf
    prev[1:] = end[:-1]
    own = v >= prev
    t_next = np.empty(n)
    t_next[:-1] = t[1:]
    t_next[-1] = span_h
    gap_down = np.minimum(end, t_next) - t
    # most plans start and finish inside their own gap; only the rest need the overlap arithmetic
    simple = own & (v <= t_next)
    totals = simple.astype(float) @ parts
    rest = np.flatnonzero(~simple)
    if len(rest):
        active = np.maximum.accumulate(np.where(own, np.arange(n), 0))[rest]
        o0 = t[rest] - t[active]
        o1 = o0 + gap_down[rest]
        p = parts[active]
        hi = np.cumsum(p, axis=1)
        lo = hi - p
        share = np.clip(o1[:, None], lo, hi) - np.clip(o0[:, None], lo, hi)
        totals = totals + share.sum(axis=0)
    for k, b in enumerate(PARTS):
        down[b] = float(totals[k])
    run_start = np.empty(n + 1)
    run_start[0] = 0.0
    run_start[1:] = t + gap_down
    run_end = np.empty(n + 1)
    run_end[:-1] = t
    run_end[-1] = span_h
    end_mode = np.empty(n + 1, dtype=np.int8)
    end_mode[:-1] = plan.mode
    end_mode[-1] = KEEP
    restarts = int(np.count_nonzero(own & plan.counts))
    return _finish(plan, span_h, down, run_end - run_start, run_start, end_mode, restarts)


def _finish(plan: Plan, span_h: float, down: dict[Badput, float], runs: np.ndarray,
            run_start: np.ndarray, end_mode: np.ndarray, restarts: int) -> Timeline:
    frac = _out_frac(plan, run_start, runs)
    groups: dict[int, tuple[np.ndarray, np.ndarray | None]] = {}
    for mode in np.unique(end_mode):
        sel = end_mode == mode
        groups[int(mode)] = (runs[sel], None if frac is None else 1.0 - frac[sel])
    reduced = 0.0 if frac is None else float(runs @ frac)
    return Timeline(down, runs, run_start, end_mode, restarts, groups, reduced,
                    spare_idle_node_h(plan, span_h))


def _out_frac(plan: Plan, run_start: np.ndarray, runs: np.ndarray) -> np.ndarray | None:
    if plan.out_t is None or len(plan.out_t) == 0:
        return None
    out_h = capacity_loss(plan, run_start, run_start + runs)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(runs > 0, np.clip(out_h / (plan.n_nodes * runs), 0.0, 1.0), 0.0)


def snapshot_time(x: np.ndarray, tau: np.ndarray | float, w: float) -> np.ndarray:
    """Blocking snapshot time within the first ``x`` hours of a run."""
    c = tau + w
    k = np.floor(x / c)
    return k * w + np.maximum(0.0, x - k * c - tau)


def capacity_loss(plan: Plan, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Node-hours out for repair inside each ``[start, end]`` (elastic)."""
    if plan.out_t is None or len(plan.out_t) == 0:
        return np.zeros_like(start)
    s = plan.out_t
    cum = np.concatenate(([0.0], np.cumsum(s)))
    rep = plan.repair_h

    def g(x: np.ndarray) -> np.ndarray:
        c2 = np.searchsorted(s, x, side="right")
        c1 = np.searchsorted(s, x - rep, side="right")
        return rep * c1 + x * (c2 - c1) - (cum[c2] - cum[c1])

    return g(end) - g(start)


def spare_idle_node_h(plan: Plan, span_h: float) -> float:
    """Node-hours the hot-spare pool sat healthy and idle."""
    k = plan.spare_nodes
    if k <= 0:
        return 0.0
    s = plan.spare_out_t if plan.spare_out_t is not None else np.zeros(0)
    times = np.concatenate((s, s + plan.repair_h, [span_h]))
    delta = np.concatenate((np.ones(len(s)), -np.ones(len(s)), [0.0]))
    order = np.argsort(times, kind="stable")
    times, delta = np.minimum(times[order], span_h), delta[order]
    out = np.cumsum(delta)
    edges = np.concatenate(([0.0], times))
    widths = np.diff(edges)
    out_before = np.concatenate(([0.0], out[:-1]))
    used = np.minimum(out_before, k)
    return float(k * span_h - np.sum(used * widths))


def cycle_totals(plan: Plan, tl: Timeline, tau: np.ndarray, every_n: np.ndarray,
                 step: np.ndarray) -> dict[str, np.ndarray]:
    """Save, lost and productive job-hours for several checkpoint cycles at once.

    ``tau``, ``every_n`` and ``step`` have one entry per cycle; the result arrays too. A run of
    length ``r`` holds ``k = floor(r / c)`` full cycles and a remainder ``rem``; a rollback to the
    ``j``-th snapshot loses ``rem - excess + (k - j) tau`` of compute.
    """
    w = plan.write_h
    tau = np.asarray(tau, dtype=float)[:, None]
    every = np.asarray(every_n, dtype=float)[:, None]
    step = np.asarray(step, dtype=float)[:, None]
    c = tau + w
    save = np.zeros(len(tau))
    lost = np.zeros(len(tau))
    kept = np.zeros(len(tau))
    for mode, (r, keep) in tl.groups.items():

        def total(x: np.ndarray, keep: np.ndarray | None = keep) -> np.ndarray:
            return x.sum(axis=-1) if keep is None else x @ keep

        k = np.floor(r / c)
        rem = r - k * c
        exc = np.maximum(rem - tau, 0.0)
        s_exc = total(exc)
        save += w * total(k) + s_exc
        kept += total(r)
        if mode == FINE:
            lost += total(rem) - s_exc
        elif mode == DURABLE:
            behind = 0.0
            if plan.persist_h > 0 or np.any(every > 1):
                j = np.floor(k / every) * every
                if plan.persist_h > 0:
                    j = j - every * ((r - j * c < plan.persist_h) & (j >= every))
                behind = total(k - j) * tau[:, 0]
            lost += total(rem) - s_exc + behind
        elif mode == STEP:
            lost += total(np.minimum(rem - exc, step))
    return {"save": save, "lost": lost, "productive": kept - save - lost}


def account_many(plan: Plan, tl: Timeline, tau: np.ndarray, every_n: np.ndarray,
                 step: np.ndarray) -> list[dict[str, float]]:
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

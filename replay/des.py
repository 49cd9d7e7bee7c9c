"""A straightforward discrete-event simulation (SimPy) of the replay model, event by event.

It is the baseline of ``bench/bench_replay.py`` and the cross-check of ``replay.engine``: the job is
a SimPy process that computes, snapshots and is interrupted; each failed node's repair (its own
duration where the trace records one, ``Trace.repairs``), the node pool and elastic scale-backs
are processes of their own. Only the per-event down plans (restart, restore, ...) and rollback
modes come from ``Strategy.plan``; the pool waits (scheduler, hot spares, elastic under
``--replacement pool``), node-out counts, cycles and rollbacks are simulated. Both must give the
same numbers (within float tolerance). SimPy is a test/bench dependency, imported only here.
"""

from __future__ import annotations

import heapq

import numpy as np

from faultlens.replay.engine import DURABLE, FINE, KEEP, PARTS, STEP, Part, Plan
from faultlens.replay.model import Badput, JobSpec, Trace
from faultlens.replay.strategies import H, Strategy

END = -1


class _Sim:
    def __init__(self, env, strategy: Strategy, plan: Plan, trace: Trace, job: JobSpec) -> None:
        self.env, self.plan, self.span = env, plan, trace.span_h
        self.node_mode = strategy.node
        self.reconfig_h = job.reconfig_s * H
        self.acc = {b.value: 0.0 for b in Badput} | {"productive": 0.0, "restarts": 0.0}
        # the node pool: free nodes, and the repairs under way (return time, event) not yet
        # promised to a waiting job; a failed node may be its own replacement once repaired
        self.repairs = plan.event_repair_h
        pool = int(job.pool_nodes or 0)
        self.free = plan.spare_nodes + pool if strategy.node == "spares" else pool
        self.pending: list[tuple[float, int]] = []
        self.claimed: set[int] = set()
        self.spares = plan.spare_nodes
        self.in_repair, self.idle_area, self.idle_t = 0, 0.0, 0.0
        self.out, self.out_area, self.out_t = 0, 0.0, 0.0
        self.down: np.ndarray | None = None
        self.proc = env.process(self.job())

    # -- integrals of the idle hot spares and of the nodes out -------------------------------
    def _set_in_repair(self, delta: int) -> None:
        now = self.env.now
        self.idle_area += (self.spares - min(self.in_repair, self.spares)) * (now - self.idle_t)
        self.idle_t, self.in_repair = now, self.in_repair + delta

    def _set_out(self, delta: int) -> None:
        now = self.env.now
        self.out_area += self.out * (now - self.out_t)
        self.out_t, self.out = now, self.out + delta

    def out_integral(self) -> float:
        return self.out_area + self.out * (self.env.now - self.out_t)

    # -- processes ---------------------------------------------------------------------------
    def injector(self):
        for e, t in enumerate(self.plan.t):
            if not self.plan.counts[e]:
                continue  # elastic scale-backs come from the repair processes
            yield self.env.timeout(t - self.env.now)
            self._arrive(e)
        yield self.env.timeout(self.span - self.env.now)
        self.proc.interrupt(END)

    def _arrive(self, e: int) -> None:
        parts = self.plan.parts[e].copy()
        if self.plan.needs_node is not None and self.plan.needs_node[e]:
            wait = self._claim(e)
            if self.node_mode == "elastic":
                self._set_out(+1)
                self.env.process(self.scale_back(wait))
            elif not self.plan.instant:
                parts[Part.WAIT] = wait
        self.proc.interrupt((e, parts))

    def _claim(self, e: int) -> float:
        """The failed node of event ``e`` goes to repair; the job takes a free node, else the
        earliest repair under way that no one was promised (perhaps its own): the wait."""
        now = self.env.now
        if self.plan.instant:
            return 0.0
        heapq.heappush(self.pending, (now + float(self.repairs[e]), e))
        self.env.process(self.repair(e))
        if self.free >= 1:
            self.free -= 1
            return 0.0
        back, who = heapq.heappop(self.pending)
        self.claimed.add(who)
        return back - now

    def repair(self, e: int):
        self._set_in_repair(+1)
        yield self.env.timeout(float(self.repairs[e]))
        self._set_in_repair(-1)
        if e in self.claimed:
            self.claimed.discard(e)  # the node goes to the job that waited for it
        else:
            self.pending = [p for p in self.pending if p[1] != e]  # back in the pool
            heapq.heapify(self.pending)
            self.free += 1

    def scale_back(self, wait: float):
        """Elastic: the job runs a node short until its replacement comes."""
        yield self.env.timeout(wait)
        self._set_out(-1)
        if self.env.now < self.span:
            self.proc.interrupt((-2, np.array([0.0, 0.0, self.reconfig_h, 0.0])))

    # -- the job ---------------------------------------------------------------------------------
    def job(self):
        import simpy

        self._start_run()
        while True:
            try:
                if self.down is not None:
                    yield self.env.timeout(max(self.down_end - self.env.now, 0.0))
                    self._close_down(self.env.now)
                    self._start_run()
                else:
                    length = self.plan.tau_h if self.phase == "compute" else self.plan.write_h
                    yield self.env.timeout(max(self.phase_start + length - self.env.now, 0.0))
                    self._next_phase()
            except simpy.Interrupt as irq:
                if irq.cause == END:
                    if self.down is not None:
                        self._close_down(self.env.now)
                    else:
                        self._close_run(KEEP)
                    return
                self._event(*irq.cause)

    def _start_run(self) -> None:
        now = self.env.now
        self.run_start, self.phase, self.phase_start = now, "compute", now
        self.snaps: list[float] = []
        self.run_save = 0.0
        self.run_out0 = self.out_integral()

    def _next_phase(self) -> None:
        now = self.env.now
        if self.phase == "compute":
            self.phase = "snapshot"
        else:
            self.run_save += self.plan.write_h
            self.snaps.append(now)
            self.phase = "compute"
        self.phase_start = now

    def _close_run(self, mode: int) -> None:
        p, now = self.plan, self.env.now
        r = now - self.run_start
        if self.phase == "compute":
            current, partial = now - self.phase_start, 0.0
        else:
            current, partial = p.tau_h, now - self.phase_start
        save = self.run_save + partial
        k = len(self.snaps)
        lost = 0.0
        if mode == FINE:
            lost = current
        elif mode == DURABLE:
            durable = 0
            for j in range(k - k % p.every_n, 0, -p.every_n):
                if now - self.snaps[j - 1] >= p.persist_h:
                    durable = j
                    break
            lost = (k - durable) * p.tau_h + current
        elif mode == STEP:
            lost = min(current, p.step_h)
        keep = 1.0
        if p.out_t is not None and r > 0:
            frac = (self.out_integral() - self.run_out0) / (p.n_nodes * r)
            keep = 1.0 - min(max(frac, 0.0), 1.0)
            self.acc[Badput.REDUCED_THROUGHPUT.value] += r * (1.0 - keep)
        self.acc[Badput.CHECKPOINT_SAVE.value] += save * keep
        self.acc[Badput.LOST_PROGRESS.value] += lost * keep
        self.acc["productive"] += (r - save - lost) * keep

    def _event(self, e: int, parts: np.ndarray) -> None:
        now = self.env.now
        if self.down is None:
            self._close_run(int(self.plan.mode[e]) if e >= 0 else KEEP)
        elif now + parts.sum() < self.down_end:
            return  # absorbed: the current down plan ends later
        else:
            self._close_down(now)
        if e >= 0:
            self.acc["restarts"] += 1
        self.down, self.down_t0, self.down_end = parts, now, now + parts.sum()

    def _close_down(self, now: float) -> None:
        elapsed = now - self.down_t0
        hi = np.cumsum(self.down)
        lo = hi - self.down
        for k, b in enumerate(PARTS):
            self.acc[b.value] += min(max(elapsed, lo[k]), hi[k]) - lo[k]
        self.down = None

    def result(self) -> dict[str, float]:
        self._set_in_repair(0)
        out = dict(self.acc)
        out["spare_idle"] = self.idle_area if self.plan.spare_nodes else 0.0
        return out


def simulate(strategy: Strategy, trace: Trace, job: JobSpec) -> dict[str, float]:
    """Job-hours per bucket, like ``replay.engine.account``, by discrete-event simulation."""
    import simpy

    plan = strategy.plan(trace, job)
    env = simpy.Environment()
    sim = _Sim(env, strategy, plan, trace, job)
    env.process(sim.injector())
    env.run(until=sim.proc)
    return sim.result()

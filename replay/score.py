"""Scoring: ETTR, goodput and badput GPU-hours, restarts, dollars; resampled confidence intervals,
parameter sweeps and a ranking of strategies."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from faultlens.ingest.errors import ConfigError
from faultlens.replay.engine import Plan, account, account_many, productive_many, timeline
from faultlens.replay.generate import block_bootstrap, fit_to_job
from faultlens.replay.model import BUCKETS, JOB_FIELDS, JobSpec, Trace
from faultlens.replay.strategies import H, Strategy, resolve

log = logging.getLogger(__name__)

# CLI / sweep names that differ from JobSpec fields
PARAM_ALIASES = {"job_gpus": "gpus", "cluster_gpus": "gpus", "interval": "interval_min"}
INT_PARAMS = {"gpus", "spares", "gpus_per_node"}
# Parameters that change only the checkpoint cycle, so a sweep can reuse the down-time timeline.
CYCLE_ONLY = {"interval_min", "mem_interval_s", "step_time_s", "usd_per_gpu_h"}


@dataclass
class Score:
    name: str
    params: dict[str, Any]
    ettr: float
    goodput_gpu_h: float
    badput_gpu_h: dict[str, float]
    restarts: float
    cost_usd: float
    ettr_ci: list[float] = field(default_factory=lambda: [float("nan"), float("nan")])
    spare_idle_gpu_h: float = 0.0
    interruptions: int = 0
    window_h: float = 0.0
    gpus: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "params": self.params,
            "ettr": round(self.ettr, 6),
            "goodput_gpu_h": round(self.goodput_gpu_h, 3),
            "badput_gpu_h": {k: round(v, 3) for k, v in self.badput_gpu_h.items()},
            "restarts": self.restarts,
            "cost_usd": round(self.cost_usd, 2),
            "ettr_ci": [round(x, 6) for x in self.ettr_ci],
            "spare_idle_gpu_h": round(self.spare_idle_gpu_h, 3),
            "interruptions": self.interruptions,
            "window_h": round(self.window_h, 3),
            "gpus": self.gpus,
        }


def parse_param(name: str) -> str:
    field_name = PARAM_ALIASES.get(name, name)
    if field_name not in JOB_FIELDS or field_name in ("checkpoint_async",):
        raise ConfigError(f"cannot sweep {name!r}; try one of: {', '.join(sorted(JOB_FIELDS))}")
    return field_name


def job_with(job: JobSpec, param: str, value: float) -> JobSpec:
    return job.with_(**{param: int(round(value)) if param in INT_PARAMS else float(value)})


def evaluate(strategy: Strategy, trace: Trace, job: JobSpec) -> dict[str, float]:
    """One replay: job-hours per bucket on a trace already fitted to the job."""
    return account(strategy.plan(trace, job), trace.span_h)


def _score(
    strategy: Strategy,
    trace: Trace,
    job: JobSpec,
    acc: dict[str, float],
    ettrs: np.ndarray,
    extra: dict[str, Any],
) -> Score:
    gpus = job.n_gpus(trace)
    span = trace.span_h
    badput = {b.value: acc[b.value] * gpus for b in BUCKETS}
    spare_gpu_h = acc["spare_idle"] * job.gpn(trace)
    lost = sum(badput.values()) + spare_gpu_h
    ci = (
        [float(np.percentile(ettrs, 2.5)), float(np.percentile(ettrs, 97.5))]
        if len(ettrs)
        else [float("nan"), float("nan")]
    )
    return Score(
        name=strategy.name,
        params=_params(strategy, trace, job) | extra,
        ettr=acc["productive"] / span if span > 0 else 0.0,
        goodput_gpu_h=acc["productive"] * gpus,
        badput_gpu_h=badput,
        restarts=acc["restarts"],
        cost_usd=lost * job.usd_per_gpu_h,
        ettr_ci=ci,
        spare_idle_gpu_h=spare_gpu_h,
        interruptions=trace.n_events,
        window_h=span,
        gpus=gpus,
    )


def _params(s: Strategy, trace: Trace, job: JobSpec) -> dict[str, Any]:
    block_h = (job.snapshot_s if job.checkpoint_async else job.checkpoint_write_s) * H
    p: dict[str, Any] = {
        "job_gpus": job.n_gpus(trace),
        "interval_min": round(s.storage_interval_h(trace, job, block_h) * 60.0, 3),
        "checkpoint_write_s": job.checkpoint_write_s,
        "checkpoint_async": job.checkpoint_async,
        "restart_s": job.restart_s,
        "restore_s": job.restore_s,
    }
    if s.ckpt == "in-memory":
        p |= {"mem_interval_s": job.mem_interval_s, "mem_restore_s": job.mem_restore_s}
    p["replacement"] = job.replacement
    if job.replacement == "pool" or s.node == "elastic":
        known = trace.repair_h is not None and bool(np.isfinite(trace.repair_h).any())
        p["repair_h"] = (
            round(float(np.mean(trace.repairs(job.repair_h))), 3) if known else job.repair_h
        )
        p["repair_source"] = "trace" if known else "repair_h"
    if job.replacement == "pool":
        p["pool_nodes"] = int(job.pool_nodes or 0) + (
            job.n_spares(trace) if s.node == "spares" else 0
        )
    if s.node == "spares":
        p |= {"spares": job.n_spares(trace), "spare_swap_s": job.spare_swap_s}
    if s.node == "elastic":
        p["reconfig_s"] = job.reconfig_s
    if s.warning == "migrate":
        p["migrate_s"] = job.migrate_s
    if s.warning == "drain":
        p["false_alarms"] = len(trace.false_alarm_h)
        p["predicted"] = int(trace.predicted.sum())
    return p


def replay(
    trace: Trace,
    strategies: Sequence[str | Strategy],
    job: JobSpec | None = None,
    *,
    sweep: tuple[str, Sequence[float]] | None = None,
    resamples: int = 100,
    seed: int = 0,
    block_h: float = 24.0,
) -> list[Score]:
    """Score each strategy (for each swept value) on the trace, with bootstrap ETTR intervals."""
    job = job or JobSpec()
    trace = trace.in_window()  # events outside the window are not replayed (nor resampled)
    if job.pool_nodes is None:  # the scheduler's pool: the fleet's nodes beyond the job's
        job = job.with_(pool_nodes=max(0, trace.fleet_nodes - job.n_nodes(trace)))
    strats = [s if isinstance(s, Strategy) else resolve(s) for s in strategies]
    param, values = (
        (parse_param(sweep[0]), [float(v) for v in sweep[1]]) if sweep else (None, [None])
    )
    jobs = [job if v is None else job_with(job, param, v) for v in values]
    rng = np.random.default_rng(seed)
    sizes = _distinct_sizes(jobs)
    base = {g: fit_to_job(trace, j, seed) for g, j in sizes.items()}
    samples = [block_bootstrap(trace, rng, block_h) for _ in range(resamples)]
    fitted = {
        g: [fit_to_job(smp, j, seed + 1 + k) for k, smp in enumerate(samples)]
        for g, j in sizes.items()
    }
    out: list[Score] = []
    for s in strats:
        accs = _run_grid(s, [base[j.gpus] for j in jobs], jobs, param)
        ettr_grid = np.zeros((resamples, len(jobs)))
        for k in range(resamples):
            traces = [fitted[j.gpus][k] for j in jobs]
            spans = np.array([tr.span_h for tr in traces])
            ettr_grid[k] = _productive_grid(s, traces, jobs, param) / spans
        for m, (j, v) in enumerate(zip(jobs, values, strict=True)):
            extra = {} if v is None else {"sweep": {sweep[0]: v}}  # type: ignore[index]
            out.append(_score(s, base[j.gpus], j, accs[m], ettr_grid[:, m], extra))
    return out


def _distinct_sizes(jobs: list[JobSpec]) -> dict[int | None, JobSpec]:
    sizes: dict[int | None, JobSpec] = {}
    for j in jobs:
        sizes.setdefault(j.gpus, j)
    return sizes


def _run_grid(
    s: Strategy, traces: list[Trace], jobs: list[JobSpec], param: str | None
) -> list[dict[str, float]]:
    """Replays of one strategy for each job of a sweep; a cycle-only sweep shares the timeline."""
    if param == "interval_min" and s.interval == "young-daly" and len(jobs) > 1:
        return [evaluate(s, traces[0], jobs[0])] * len(jobs)  # the interval is not used
    if param in CYCLE_ONLY and len(jobs) > 1:
        plan = s.plan(traces[0], jobs[0])
        tl = timeline(plan, traces[0].span_h)
        cycles = np.array([_cycle(plan, s, traces[0], j) for j in jobs])
        return account_many(plan, tl, cycles[:, 0], cycles[:, 1], cycles[:, 2])
    return [evaluate(s, t, j) for t, j in zip(traces, jobs, strict=True)]


def _productive_grid(
    s: Strategy, traces: list[Trace], jobs: list[JobSpec], param: str | None
) -> np.ndarray:
    """Productive job-hours of ``_run_grid``'s replays, without the badput breakdown."""
    if param == "interval_min" and s.interval == "young-daly" and len(jobs) > 1:
        plan = s.plan(traces[0], jobs[0])
        one = np.ones(1)
        value = productive_many(
            plan, traces[0].span_h, one * plan.tau_h, one * plan.every_n, one * plan.step_h
        )
        return np.repeat(value, len(jobs))
    if param in CYCLE_ONLY and len(jobs) > 1:
        plan = s.plan(traces[0], jobs[0])
        cycles = np.array([_cycle(plan, s, traces[0], j) for j in jobs])
        return productive_many(plan, traces[0].span_h, cycles[:, 0], cycles[:, 1], cycles[:, 2])
    return np.array([evaluate(s, t, j)["productive"] for t, j in zip(traces, jobs, strict=True)])


def _cycle(plan: Plan, s: Strategy, trace: Trace, job: JobSpec) -> tuple[float, float, float]:
    """(tau_h, every_n, step_h) of ``plan`` recomputed for ``job``: a cycle-only change."""
    block_h = (job.snapshot_s if job.checkpoint_async else job.checkpoint_write_s) * H
    storage_tau = s.storage_interval_h(trace, job, block_h)
    step_h = job.step_time_s * H
    if s.ckpt == "in-memory":
        tau = job.mem_interval_s * H
        return tau, max(1, round(storage_tau / (tau + plan.write_h))), step_h
    return storage_tau, 1, step_h


# Sweep parameters whose ETTR curve has the checkpoint-interval shape ``a + b x + c / x``
# (overhead w / x of writing, x / 2M of lost work).
INTERVAL_PARAMS = {"interval_min", "interval", "mem_interval_s"}


def sweep_best(scores: Sequence[Score]) -> list[dict[str, Any]]:
    """Per strategy of a sweep, the best value. For an interval the ETTR curve is flat near its
    optimum and the raw maximum of one trace is noise (each failure loses a random share of an
    interval), so the optimum is that of a least-squares fit ``a + b x + c / x`` over the swept
    values from half to twice the raw best (``method: "fit"``), kept inside the swept range;
    otherwise the best swept value (``max``)."""
    groups: dict[str, list[Score]] = {}
    for sc in scores:
        if sc.params.get("sweep"):
            groups.setdefault(sc.name, []).append(sc)
    out = []
    for name, group in groups.items():
        param = next(iter(group[0].params["sweep"]))
        x = np.array([g.params["sweep"][param] for g in group], dtype=float)
        y = np.array([g.ettr for g in group])
        top = int(np.argmax(y))
        best = {"name": name, "param": param, "value": float(x[top]), "ettr": float(y[top])}
        best["method"] = "max"
        near = (x >= x[top] / 2) & (x <= x[top] * 2)  # the fit is local: the shape is first-order
        if param in INTERVAL_PARAMS and near.sum() >= 4 and np.all(x > 0):
            xs, ys = x[near], y[near]
            design = np.column_stack([np.ones_like(xs), xs, 1.0 / xs])
            (a, b, c), *_ = np.linalg.lstsq(design, ys, rcond=None)
            if b < 0 and c < 0:
                opt = float(np.clip(np.sqrt(c / b), x.min(), x.max()))
                best |= {"value": opt, "ettr": float(a + b * opt + c / opt), "method": "fit"}
        best["value"], best["ettr"] = round(best["value"], 3), round(best["ettr"], 6)
        out.append(best)
    return out


def rank(scores: Sequence[Score]) -> list[Score]:
    """Best first: the fewest dollars lost (badput plus idle spares), then the highest ETTR."""
    return sorted(scores, key=lambda s: (s.cost_usd, -s.ettr))


def predictor_value_gpu_h(
    trace: Trace, job: JobSpec | None = None, baseline: str = "checkpoint"
) -> float:
    """GPU-hours the failure predictor saves: predictive drain minus the strategy without it."""
    job = job or JobSpec()
    fitted = fit_to_job(trace, job)
    with_pred = evaluate(resolve(f"{baseline}+predictive-drain"), fitted, job)
    without = evaluate(resolve(baseline), fitted, job)
    return (with_pred["productive"] - without["productive"]) * job.n_gpus(fitted)

"""Synthetic interruption traces (Poisson, Llama-3-like), fitting a trace to a job, resampling.

The Llama 3 numbers are published-figures.md A1: 419 unexpected interruptions (counts per component
below) and 47 planned ones in 54 days on 16,384 H100 GPUs (2,048 nodes).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from faultlens.replay.model import JobSpec, Trace

LLAMA3_GPUS = 16_384
LLAMA3_DAYS = 54.0
LLAMA3_PLANNED = 47
# Table 5 of the Llama 3 paper (A1): component -> (count, takes the node out for repair)
LLAMA3_CAUSES: dict[str, tuple[int, bool]] = {
    "faulty_gpu": (148, True),
    "gpu_hbm3": (72, True),
    "software_bug": (54, False),
    "network_switch_cable": (35, True),
    "host_maintenance": (32, True),
    "gpu_sram": (19, True),
    "gpu_gsp": (17, True),
    "nic": (7, True),
    "nccl_watchdog": (7, False),
    "silent_data_corruption": (6, True),
    "gpu_thermal": (6, True),
    "ssd": (3, True),
    "power_supply": (3, True),
    "server_chassis": (2, True),
    "io_expansion_board": (2, True),
    "dependency": (2, False),
    "cpu": (2, True),
    "system_memory": (2, True),
}
LLAMA3_UNEXPECTED = sum(c for c, _ in LLAMA3_CAUSES.values())  # 419


def poisson_times(
    rate_per_h: float, span_h: float, rng: np.random.Generator, stratified: bool = False
) -> tuple[np.ndarray, float]:
    """Event times of a Poisson process, and the window length.

    ``stratified`` draws the gaps at the exponential quantiles (i + 1/2) / n in random order: the
    same distribution with almost no sampling noise, for theory checks. The window then ends one
    gap after the last event.
    """
    if rate_per_h <= 0:
        return np.zeros(0), span_h
    if stratified:
        n = max(1, round(rate_per_h * span_h))
        q = (np.arange(n + 1) + 0.5) / (n + 1)
        gaps = -np.log1p(-q) / rate_per_h
        rng.shuffle(gaps)
        t = np.cumsum(gaps)
        return t[:-1], float(t[-1])
    n = rng.poisson(rate_per_h * span_h)
    return np.sort(rng.uniform(0.0, span_h, n)), span_h


def poisson_trace(
    rate_per_h: float,
    span_h: float,
    fleet_nodes: int,
    *,
    seed: int = 0,
    stratified: bool = False,
    hardware_frac: float = 1.0,
    warned_frac: float = 0.0,
    predicted_frac: float = 0.0,
    false_alarms_per_h: float = 0.0,
    gpus_per_node: int = 8,
) -> Trace:
    """Interruptions at a constant rate on random nodes of a fleet."""
    rng = np.random.default_rng(seed)
    t, span = poisson_times(rate_per_h, span_h, rng, stratified)
    n = len(t)
    fa = np.sort(rng.uniform(0.0, span, rng.poisson(false_alarms_per_h * span)))
    return Trace(
        t_h=t,
        node=rng.integers(0, fleet_nodes, n),
        hardware=rng.random(n) < hardware_frac,
        warned=rng.random(n) < warned_frac,
        predicted=rng.random(n) < predicted_frac,
        span_h=span,
        fleet_nodes=fleet_nodes,
        gpus_per_node=gpus_per_node,
        false_alarm_h=fa,
        source="poisson",
    )


def llama3_trace(
    gpus: int = LLAMA3_GPUS,
    days: float = LLAMA3_DAYS,
    *,
    seed: int = 0,
    predicted_frac: float = 0.0,
    false_alarms_per_day: float = 0.0,
) -> Trace:
    """A Llama-3-like trace: Table 5's causes at the published rate, scaled to ``gpus`` and
    ``days``; planned maintenance gives warning (it is announced)."""
    rng = np.random.default_rng(seed)
    scale = gpus / LLAMA3_GPUS * days / LLAMA3_DAYS
    span_h = days * 24.0
    names = list(LLAMA3_CAUSES)
    counts = np.array([LLAMA3_CAUSES[c][0] for c in names], dtype=float)
    n_unexp = rng.poisson(LLAMA3_UNEXPECTED * scale)
    n_plan = rng.poisson(LLAMA3_PLANNED * scale)
    cause_idx = rng.choice(len(names), n_unexp, p=counts / counts.sum())
    hw_of = np.array([LLAMA3_CAUSES[c][1] for c in names])
    t = np.concatenate((rng.uniform(0, span_h, n_unexp), rng.uniform(0, span_h, n_plan)))
    hardware = np.concatenate((hw_of[cause_idx], np.ones(n_plan, dtype=bool)))
    warned = np.concatenate((np.zeros(n_unexp, dtype=bool), np.ones(n_plan, dtype=bool)))
    predicted = np.concatenate((rng.random(n_unexp) < predicted_frac, np.zeros(n_plan, bool)))
    causes = np.concatenate((np.array(names)[cause_idx], np.full(n_plan, "planned_maintenance")))
    order = np.argsort(t, kind="stable")
    nodes = max(1, gpus // 8)
    fa = np.sort(rng.uniform(0, span_h, rng.poisson(false_alarms_per_day * days)))
    return Trace(
        t_h=t[order],
        node=rng.integers(0, nodes, len(t)),
        hardware=hardware[order],
        warned=warned[order],
        predicted=predicted[order] & hardware[order],
        span_h=span_h,
        fleet_nodes=nodes,
        false_alarm_h=fa,
        cause=tuple(causes[order].tolist()),
        source="llama3",
    )


def fit_to_job(trace: Trace, job: JobSpec, seed: int = 0) -> Trace:
    """The trace as the job sees it: thinned (or superposed) to the job's share of the fleet, and
    cut to the job's planned length. A job of ``p`` times the fleet's nodes sees each event with
    probability ``p`` (several shifted copies of the trace when ``p > 1``)."""
    nodes = job.n_nodes(trace)
    out = trace
    if job.planned_h is not None and job.planned_h < trace.span_h:
        keep = trace.t_h < job.planned_h
        fa = trace.false_alarm_h[trace.false_alarm_h < job.planned_h]
        out = replace(out.subset(keep), span_h=float(job.planned_h), false_alarm_h=fa)
    ratio = nodes / max(out.fleet_nodes, 1)
    if math.isclose(ratio, 1.0):
        return replace(out, gpus_per_node=job.gpn(trace))
    rng = np.random.default_rng(seed)
    copies = max(1, math.ceil(ratio))
    if copies > 1:
        out = _superpose(out, copies, rng)
    p = ratio / copies
    keep = rng.random(out.n_events) < p
    fa = out.false_alarm_h[rng.random(len(out.false_alarm_h)) < p]
    thinned = out.subset(keep)
    return replace(thinned, fleet_nodes=nodes, false_alarm_h=fa, gpus_per_node=job.gpn(trace))


def _superpose(trace: Trace, copies: int, rng: np.random.Generator) -> Trace:
    shifts = rng.uniform(0, trace.span_h, copies)
    shifts[0] = 0.0
    span = trace.span_h
    t = np.concatenate([(trace.t_h + s) % span for s in shifts])
    node = np.concatenate(
        [np.where(trace.node >= 0, trace.node + k * trace.fleet_nodes, -1) for k in range(copies)]
    )
    fa = np.sort(np.concatenate([(trace.false_alarm_h + s) % span for s in shifts]))
    order = np.argsort(t, kind="stable")
    cause = (
        tuple(np.tile(np.array(trace.cause, dtype=object), copies)[order]) if trace.cause else ()
    )
    repair = None if trace.repair_h is None else np.tile(trace.repair_h, copies)[order]
    return replace(
        trace,
        repair_h=repair,
        t_h=t[order],
        node=node[order],
        hardware=np.tile(trace.hardware, copies)[order],
        warned=np.tile(trace.warned, copies)[order],
        predicted=np.tile(trace.predicted, copies)[order],
        fleet_nodes=trace.fleet_nodes * copies,
        false_alarm_h=fa,
        cause=cause,
    )


def block_bootstrap(trace: Trace, rng: np.random.Generator, block_h: float = 24.0) -> Trace:
    """A resample of the trace: its window cut into blocks (one day by default, at least 20
    blocks), drawn with replacement and laid end to end. Keeps bursts within a block together."""
    trace = trace.in_window()  # an event outside the window has no block
    span = trace.span_h
    n_blocks = max(1, round(span / block_h), min(20, math.ceil(span)))
    size = span / n_blocks
    choice = rng.integers(0, n_blocks, n_blocks)
    idx, new_t = _gather(trace.t_h, size, n_blocks, choice)
    _, fa = _gather(trace.false_alarm_h, size, n_blocks, choice)
    # causes are not resampled: the engine does not read them
    return trace.take(idx, new_t, fa)


def _gather(
    t: np.ndarray, size: float, n_blocks: int, choice: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    block = np.minimum((t // size).astype(np.int64), n_blocks - 1)
    starts = np.searchsorted(block, np.arange(n_blocks), side="left")
    ends = np.searchsorted(block, np.arange(n_blocks), side="right")
    counts = ends[choice] - starts[choice]
    total = int(counts.sum())
    first = np.cumsum(counts) - counts
    idx = np.repeat(starts[choice], counts) + (np.arange(total) - np.repeat(first, counts))
    new_t = t[idx] - block[idx] * size + np.repeat(np.arange(n_blocks) * size, counts)
    return idx, new_t

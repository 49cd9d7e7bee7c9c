"""The failure model: when and where failures happen, and the log evidence around them.

Hardware failures are a Poisson process per node (lemon nodes several times faster), drawn before
scheduling so that the scheduler can kill the jobs they hit. Failures that only exist inside a job
(software bugs, dependencies, NCCL watchdog timeouts) are placed afterwards, uniformly over busy
node-time. Each failure then gets its evidence: structured kernel events (``KEvent``) that
``kernel_logs`` renders as real log lines — precursors hours to days before (correctable ECC and row
remaps before an uncorrectable HBM error, non-fatal NVLink errors before link loss, link flaps
before a cable dies), the failure's own lines, and follow-ups. Not every failure has precursors, and
benign episodes put the same precursors on healthy hardware.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from faultlens.synth.cluster import Failure, Job, Node, kill_job, still_running
from faultlens.synth.config import VARIANT_PRECURSOR_P, Cause, SynthConfig

HOUR = 3600.0
DAY = 86400.0


@dataclass
class KEvent:
    """One kernel-log event to render: ``key`` picks the message template (see kernel_logs)."""

    ts_s: float
    node: int
    gpu: int | None
    key: str
    fid: int | None = None  # the failure it belongs to (None: benign or background)
    precursor: bool = False
    extra: dict = field(default_factory=dict)


def _hw_causes(config: SynthConfig) -> list[Cause]:
    return [c for c in config.causes if not c.needs_job]


def sample_hw_failures(
    config: SynthConfig, nodes: list[Node], rng: np.random.Generator
) -> list[Failure]:
    """Node-level failures over the window; lemons at ``lemon_multiplier`` times the base rate.

    The base rate is chosen so that the expected cluster-wide rate of all failures (hardware and
    job-bound) equals ``failures_per_1000_node_days`` and the causes follow the configured mix.
    """
    total = sum(c.count for c in config.causes)
    hw = _hw_causes(config)
    hw_share = sum(c.count for c in hw) / total
    n = len(nodes)
    n_lemon = sum(nd.lemon for nd in nodes)
    weight = np.array([config.lemon_multiplier if nd.lemon else 1.0 for nd in nodes])
    rate_hw = config.failures_per_1000_node_days / 1000 * hw_share  # per node-day, cluster mean
    base = rate_hw * n / (n - n_lemon + n_lemon * config.lemon_multiplier)
    horizon = config.days * DAY
    p = np.array([c.count for c in hw], dtype=float)
    p /= p.sum()
    failures: list[Failure] = []
    if config.interfailure_shape == 1.0:
        counts = rng.poisson(base * weight * config.days)
        times_all = rng.uniform(0, horizon, size=int(counts.sum()))
    else:
        counts, times_all = _renewal_times(base * weight / DAY, horizon, config, rng)
    total_n = int(counts.sum())
    cause_all = rng.choice(len(hw), size=total_n, p=p)
    spread = rng.lognormal(0.0, config.repair_sigma, size=total_n)
    settle = rng.uniform(HOUR, 12 * HOUR, size=total_n)
    median_repair = np.array([max(c.repair_h, 0.25) * HOUR for c in hw])
    if config.repair_median_h is not None:
        median_repair = np.full(len(hw), max(config.repair_median_h, 0.05) * HOUR)
    k = 0
    for i in np.flatnonzero(counts).tolist():
        sl = slice(k, k + int(counts[i]))
        k += int(counts[i])
        last_end = -np.inf
        for t, ci, sp, st in zip(
            np.sort(times_all[sl]).tolist(),
            cause_all[sl].tolist(),
            spread[sl].tolist(),
            settle[sl].tolist(),
            strict=True,
        ):
            t = max(t, last_end + st)  # not while the node is still in repair
            if t >= horizon:
                break
            f = Failure(0, t, i, None, hw[ci], float(median_repair[ci] * sp))
            failures.append(f)
            last_end = f.end_s
    failures.sort(key=lambda f: (f.ts_s, f.node))
    failures = _expand_switch_failures(config, nodes, failures, rng)
    for k, f in enumerate(failures):
        f.fid = k
        _pick_variant(f, nodes[f.node], rng, config.precursor_scale())
    return failures


def _renewal_times(
    rate_per_s: np.ndarray, horizon: float, config: SynthConfig, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Per node, a renewal process with Weibull gaps of shape ``interfailure_shape`` and mean
    1 / rate (the same long-run rate as the Poisson path): counts and the times, node by node."""
    from faultlens.synth.profile import weibull_scale

    k = config.interfailure_shape
    counts = np.zeros(len(rate_per_s), dtype=np.int64)
    times: list[np.ndarray] = []
    for i, rate in enumerate(rate_per_s.tolist()):
        if rate <= 0:
            continue
        scale = weibull_scale(1.0 / rate, k)
        n_draw = max(8, int(horizon * rate * 3) + 8)
        t = np.cumsum(scale * rng.weibull(k, n_draw))
        while t[-1] < horizon:  # rare: draw more gaps
            t = np.concatenate([t, t[-1] + np.cumsum(scale * rng.weibull(k, n_draw))])
        t = t[t < horizon]
        counts[i] = len(t)
        times.append(t)
    return counts, (np.concatenate(times) if times else np.zeros(0))


def _expand_switch_failures(
    config: SynthConfig, nodes: list[Node], failures: list[Failure], rng: np.random.Generator
) -> list[Failure]:
    """Turn a share of network failures into leaf-switch failures that hit every node behind it."""
    by_leaf: dict[str, list[int]] = {}
    for nd in nodes:
        by_leaf.setdefault(nd.leaf, []).append(nd.index)
    out: list[Failure] = []
    for f in failures:
        out.append(f)
        if f.cause.category != "network" or rng.random() >= config.switch_share:
            continue
        f.leaf = nodes[f.node].leaf
        f.variant = "switch"
        f.repair_s = float(rng.uniform(1, 6) * HOUR)
        for j in by_leaf[f.leaf]:
            if j != f.node:
                out.append(
                    Failure(
                        0,
                        f.ts_s + float(rng.uniform(0, 2)),
                        j,
                        None,
                        f.cause,
                        f.repair_s,
                        leaf=f.leaf,
                        primary=f,
                        variant="switch",
                    )
                )
    out.sort(key=lambda f: (f.ts_s, f.node))
    return out


def _pick_variant(f: Failure, node: Node, rng: np.random.Generator, scale: float = 1.0) -> None:
    name = f.cause.name
    gpu_level = f.cause.category in ("gpu_hardware", "gpu_memory")
    f.gpu = int(rng.integers(len(node.gpus))) if gpu_level else None
    if f.variant == "switch":
        pass
    elif name == "Faulty GPU":
        f.variant = "nvlink" if rng.random() < 0.4 else "bus"
    elif name == "GPU HBM3 Memory":
        f.variant = "dbe" if rng.random() < 0.3 else "uncontained"
    elif name in ("Network Switch/Cable", "NIC"):
        f.variant = f.variant or "link"
        f.gpu = None
    p = min(1.0, scale * VARIANT_PRECURSOR_P.get((name, f.variant), f.cause.precursor_p))
    f.has_precursors = f.primary is None and rng.random() < p


def place_job_failures(
    config: SynthConfig,
    nodes: list[Node],
    jobs: list[Job],
    first_fid: int,
    rng: np.random.Generator,
) -> list[Failure]:
    """Software-side failures, placed uniformly in busy node-time; each kills its job."""
    total = sum(c.count for c in config.causes)
    sw = [c for c in config.causes if c.needs_job]
    if not sw or not jobs:
        return []
    rate = config.failures_per_1000_node_days / 1000 * sum(c.count for c in sw) / total
    n_fail = int(rng.poisson(rate * config.node_days))
    horizon = config.days * DAY
    ends = np.array([j.end_s if j.end_s is not None else horizon for j in jobs])
    starts = np.array([j.start_s for j in jobs])
    weight = np.maximum(ends - starts, 0) * np.array([len(j.nodes) for j in jobs])
    weight /= weight.sum()
    p = np.array([c.count for c in sw], dtype=float)
    p /= p.sum()
    index = {nd.name: nd.index for nd in nodes}
    out: list[Failure] = []
    for _ in range(n_fail):
        for _attempt in range(50):
            job = jobs[int(rng.choice(len(jobs), p=weight))]
            end = job.end_s if job.end_s is not None else horizon
            t = float(rng.uniform(job.start_s, end))
            if job.failure_cause is None and t < end:
                break
        else:
            continue
        cause = sw[int(rng.choice(len(sw), p=p))]
        node_name = job.nodes[int(rng.integers(len(job.nodes)))]
        f = Failure(first_fid + len(out), t, index[node_name], int(rng.integers(8)), cause, 0.0)
        f.variant = "app_fault" if cause.name == "Software Bug" and rng.random() < 0.5 else ""
        kill_job(job, f, node_name, rng)
        if cause.name == "NCCL Watchdog Timeouts":
            job.end_s = t + float(rng.uniform(600, 660))
        if job.end_s is not None and job.end_s > horizon:
            still_running(job)
            f.job = None
        out.append(f)
    return out

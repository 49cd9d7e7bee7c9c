"""The sweep's fast paths (prefix sums over sorted runs, productive-only resamples) against the
run-by-run arithmetic of a single replay."""

from __future__ import annotations

import numpy as np
import pytest

from faultlens.replay.engine import (
    DURABLE,
    FINE,
    KEEP,
    STEP,
    Plan,
    _group_direct,
    _group_sorted,
    _sorted_pays,
)
from faultlens.replay.generate import poisson_trace
from faultlens.replay.model import JobSpec
from faultlens.replay.score import evaluate, job_with, replay
from faultlens.replay.strategies import resolve

INTERVALS = [2.0, 5.0, 11.0, 30.0, 90.0, 240.0]


def plan(persist_h: float = 0.0, write_h: float = 0.02) -> Plan:
    z = np.zeros(0)
    return Plan(
        t=z,
        parts=np.zeros((0, 4)),
        mode=z.astype(np.int8),
        counts=z.astype(bool),
        tau_h=0.5,
        write_h=write_h,
        every_n=1,
        persist_h=persist_h,
        step_h=0.01,
        n_nodes=4,
    )


@pytest.mark.parametrize("mode", [KEEP, FINE, DURABLE, STEP])
@pytest.mark.parametrize("persist_h,every", [(0.0, 1.0), (0.0, 4.0), (0.05, 1.0), (0.3, 3.0)])
@pytest.mark.parametrize("weighted", [False, True])
def test_sorted_prefix_sums_match_run_by_run(mode, persist_h, every, weighted):
    rng = np.random.default_rng(mode * 10 + int(every) + int(weighted))
    r = rng.exponential(0.8, 3000)
    keep = rng.uniform(0.5, 1.0, len(r)) if weighted else None
    tau = np.array([0.05, 0.1, 0.33, 0.5, 1.7, 3.0])
    ev = np.full(len(tau), every)
    step = np.full(len(tau), 0.01)
    p = plan(persist_h)
    assert _sorted_pays(r, tau, p.write_h)
    fast = _group_sorted(p, mode, r, keep, tau, ev, step)
    slow = _group_direct(p, mode, r, keep, tau, ev, step)
    for a, b in zip(fast, slow, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-9)
    if mode == DURABLE and (every > 1 or persist_h > 0):
        assert np.all(fast[1] > _group_direct(p, FINE, r, keep, tau, ev, step)[1])


@pytest.mark.parametrize(
    "name",
    [
        "checkpoint",
        "young-daly",
        "in-memory",
        "hot-spares",
        "elastic",
        "live-migration",
        "predictive-drain",
        "elastic+in-memory+predictive-drain",
    ],
)
@pytest.mark.parametrize("async_", [False, True])
def test_interval_sweep_equals_one_replay_per_value(name, async_):
    tr = poisson_trace(
        4.0,
        400,
        6,
        seed=9,
        hardware_frac=0.7,
        warned_frac=0.2,
        predicted_frac=0.3,
        false_alarms_per_h=0.3,
    )
    job = JobSpec(
        gpus=48,
        checkpoint_async=async_,
        repair_h=3,
        replacement="pool",
        spares=2,
        restart_s=400,
        buddy_window_s=3600,
    )
    scores = replay(tr, [name], job, sweep=("interval_min", INTERVALS), resamples=3)
    assert len(scores) == len(INTERVALS)
    for s, v in zip(scores, INTERVALS, strict=True):
        acc = evaluate(resolve(name), tr, job_with(job, "interval_min", v))
        assert s.ettr == pytest.approx(acc["productive"] / tr.span_h, rel=1e-10)
        assert s.badput_gpu_h["lost_progress"] == pytest.approx(
            acc["lost_progress"] * 48, rel=1e-9, abs=1e-6
        )
        assert s.ettr_ci[0] <= s.ettr_ci[1]


def test_resampled_intervals_equal_full_replays_of_the_resamples():
    from faultlens.replay.generate import block_bootstrap, fit_to_job

    tr = poisson_trace(
        1.0, 600, 6, seed=4, hardware_frac=0.7, predicted_frac=0.3, false_alarms_per_h=0.1
    )
    job = JobSpec(gpus=48, repair_h=1, replacement="pool", buddy_window_s=4 * 3600)
    name, values = "elastic+predictive-drain", [20.0, 45.0]
    scores = replay(tr, [name], job, sweep=("interval_min", values), resamples=8, seed=3)
    rng = np.random.default_rng(3)
    samples = [fit_to_job(block_bootstrap(tr, rng), job, 4 + k) for k in range(8)]
    for s, v in zip(scores, values, strict=True):
        ettrs = [
            evaluate(resolve(name), smp, job.with_(interval_min=v))["productive"] / smp.span_h
            for smp in samples
        ]
        assert s.ettr_ci == pytest.approx(
            [np.percentile(ettrs, 2.5), np.percentile(ettrs, 97.5)], rel=1e-12
        )
    assert scores[0].ettr_ci != scores[1].ettr_ci

"""Replay edge cases of the fleet model: events outside the window, per-event repairs carried
through resampling, GPUs per node from the trace."""

from __future__ import annotations

import numpy as np

from faultlens.replay.generate import block_bootstrap, fit_to_job
from faultlens.replay.model import JobSpec, Trace
from faultlens.replay.score import replay

SPAN_H = 100.0


def _trace(t_h: list[float], repair_h: list[float] | None = None, gpn: int = 8) -> Trace:
    n = len(t_h)
    return Trace(
        t_h=np.array(t_h),
        node=np.arange(n),
        hardware=np.ones(n, bool),
        warned=np.zeros(n, bool),
        predicted=np.zeros(n, bool),
        span_h=SPAN_H,
        fleet_nodes=4,
        gpus_per_node=gpn,
        repair_h=None if repair_h is None else np.array(repair_h),
    )


def test_an_event_after_the_window_is_not_replayed_and_does_not_crash() -> None:
    tr = _trace([10.0, 50.0, SPAN_H + 30.0])
    (score,) = replay(tr, ["checkpoint"], JobSpec(), resamples=5)
    assert score.interruptions == 2
    assert score.restarts == 2


def test_resampling_keeps_each_events_repair() -> None:
    repairs = [1.0, 2.0, 3.0, 4.0]
    tr = _trace([5.0, 30.0, 60.0, 90.0], repairs)
    sample = block_bootstrap(tr, np.random.default_rng(0), block_h=10.0)
    assert sample.repair_h is not None
    by_node = dict(zip(tr.node.tolist(), repairs, strict=True))
    assert [by_node[n] for n in sample.node.tolist()] == sample.repair_h.tolist()
    assert np.all(np.diff(sample.t_h) >= 0)


def test_a_one_gpu_per_node_fleet_is_not_thinned_by_eight() -> None:
    tr = _trace([5.0, 30.0, 60.0, 90.0], gpn=1)
    job = JobSpec()  # the whole fleet: 4 nodes x 1 GPU
    fitted = fit_to_job(tr, job)
    assert job.n_gpus(tr) == 4
    assert fitted.n_events == tr.n_events
    assert fitted.gpus_per_node == 1

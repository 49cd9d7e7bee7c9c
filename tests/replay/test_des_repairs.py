"""The event-by-event baseline (replay.des, SimPy) with each event's own repair time: it simulates
the repairs, the node pool and the elastic scale-backs itself, and must agree with the engine on
the same trace - for every node axis, pool size and the instant case."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from faultlens.replay.des import simulate
from faultlens.replay.generate import poisson_trace
from faultlens.replay.model import JobSpec
from faultlens.replay.score import evaluate
from faultlens.replay.strategies import resolve


def _trace_with_repairs(seed: int):
    """A Poisson trace whose hardware events carry heavy-tailed repairs (log-normal, median 4 h);
    a fifth have none recorded (NaN: the job's --repair-h is used)."""
    tr = poisson_trace(2.0, 90, 6, seed=seed, hardware_frac=0.8, warned_frac=0.2)
    rng = np.random.default_rng(seed)
    rep = rng.lognormal(np.log(4.0), 1.2, tr.n_events)
    rep[rng.random(tr.n_events) < 0.2] = np.nan
    return replace(tr, repair_h=rep)


@pytest.mark.parametrize("name", ["checkpoint", "hot-spares", "elastic", "elastic+in-memory"])
@pytest.mark.parametrize(("replacement", "pool"), [("instant", None), ("pool", 0), ("pool", 2)])
def test_des_agrees_with_the_engine_on_per_event_repairs(name, replacement, pool) -> None:
    tr = _trace_with_repairs(seed=3)
    job = JobSpec(
        gpus=32,
        interval_min=20,
        repair_h=2.5,
        replacement=replacement,
        pool_nodes=pool,
        spares=1,
        restart_s=300,
    )
    fast, slow = evaluate(resolve(name), tr, job), simulate(resolve(name), tr, job)
    for key, value in fast.items():
        assert slow[key] == pytest.approx(value, abs=1e-9), key


def test_the_repairs_matter_to_both() -> None:
    """Not one constant: the trace's repairs change the pool's waits in the engine and in the
    simulation alike (a constant repair gives other numbers)."""
    tr = _trace_with_repairs(seed=4)
    job = JobSpec(gpus=32, interval_min=20, repair_h=2.5, replacement="pool", pool_nodes=0)
    constant = replace(tr, repair_h=None)
    s = resolve("hot-spares")
    own, const = simulate(s, tr, job), simulate(s, constant, job)
    assert own["wait_node"] != pytest.approx(const["wait_node"], rel=1e-3)
    assert own["wait_node"] == pytest.approx(evaluate(s, tr, job)["wait_node"], abs=1e-9)

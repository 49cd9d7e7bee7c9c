"""Elastic downscaling under the one replacement model: with ``--replacement pool`` the job runs
short of a node only while the pool (idle fleet nodes) has none to give, so a pool of 0 runs short
for each node's whole repair, a pool as large as the failures never does - the instant case - and
the sizes between fall in order."""

from __future__ import annotations

import numpy as np
import pytest

from faultlens.replay.model import JobSpec, Trace
from faultlens.replay.score import evaluate
from faultlens.replay.strategies import resolve

SPAN_H, REPAIR_H, RECONF_H = 40.0, 6.0, 0.05
# four hardware failures; the second and third fall inside the first's repair
TIMES = (5.0, 7.0, 9.0, 25.0)
JOB = JobSpec(gpus=16, interval_min=60, repair_h=REPAIR_H, reconfig_s=RECONF_H * 3600)


def _trace(repair_h=None) -> Trace:
    n = len(TIMES)
    return Trace(
        t_h=np.array(TIMES),
        node=np.arange(n),
        hardware=np.ones(n, bool),
        warned=np.zeros(n, bool),
        predicted=np.zeros(n, bool),
        span_h=SPAN_H,
        fleet_nodes=8,
        repair_h=repair_h,
    )


def _run(trace: Trace, **job) -> dict[str, float]:
    return evaluate(resolve("elastic"), trace, JOB.with_(**job))


def test_pool_sizes_bracket_the_instant_case() -> None:
    tr = _trace()
    instant = _run(tr, replacement="instant")
    by_pool = {k: _run(tr, replacement="pool", pool_nodes=k) for k in (0, 1, 2, 3, 50)}
    productive = [by_pool[k]["productive"] for k in (0, 1, 2, 3, 50)]
    assert productive == sorted(productive)  # more spare nodes never hurt
    assert productive[0] < productive[1] < productive[2] < instant["productive"]
    # three overlapping failures: a pool of 3 covers them all, as instant replacement does
    assert by_pool[3]["productive"] == pytest.approx(instant["productive"])
    assert by_pool[50]["productive"] == pytest.approx(instant["productive"])
    assert instant["reduced_throughput"] == pytest.approx(0.0, abs=1e-9)


def _short(outages: list[tuple[float, float]], events: list[float]) -> float:
    """Job-hours lost to running short, from the outages [out, back): the job (2 nodes) runs at
    1 - min(out / 2, 1) of its speed, and stands still RECONF_H after every failure and return."""
    edges = sorted({0.0, SPAN_H, *events})
    total = 0.0
    for lo, hi in zip(edges, edges[1:], strict=False):
        start = lo + RECONF_H if lo in events else lo
        out = sum(1 for a, b in outages if a <= lo and b >= hi)
        total += max(0.0, hi - start) * min(out / 2, 1.0)
    return total


@pytest.mark.parametrize(
    ("pool", "waits"),
    [
        (0, (6.0, 6.0, 6.0, 6.0)),  # every failed node is back after its own repair
        (1, (0.0, 4.0, 4.0, 0.0)),  # the pool node, then the first repairs, earliest first
        (2, (0.0, 0.0, 2.0, 0.0)),
        (3, (0.0, 0.0, 0.0, 0.0)),  # as instant replacement
    ],
)
def test_short_of_a_node_until_the_pool_or_a_repair_gives_one(pool: int, waits) -> None:
    got = _run(_trace(), replacement="pool", pool_nodes=pool)["reduced_throughput"]
    outages = [(t, t + w) for t, w in zip(TIMES, waits, strict=True) if w > 0]
    events = sorted({*TIMES, *(b for _, b in outages)})
    assert got == pytest.approx(_short(outages, events))


def test_per_event_repairs_drive_the_wait() -> None:
    """The trace's own repair times (not the constant): with no pool each node is short its own
    repair; with a pool of 1 the second failure gets the node whose repair ends first."""
    repairs = np.array([10.0, 1.0, 0.5, 3.0])
    tr = _trace(repair_h=repairs)
    got0 = _run(tr, replacement="pool", pool_nodes=0)["reduced_throughput"]
    outages0 = [(t, t + r) for t, r in zip(TIMES, repairs, strict=True)]
    events0 = sorted({*TIMES, *(b for _, b in outages0)})
    assert got0 == pytest.approx(_short(outages0, events0))
    # pool 1: t=5 takes the pool node (its own back at 15); t=7 waits for its own repair (back
    # at 8, the earliest), t=9 for its own (9.5); at t=25 the first is back in the pool
    got1 = _run(tr, replacement="pool", pool_nodes=1)["reduced_throughput"]
    outages1 = [(7.0, 8.0), (9.0, 9.5)]
    assert got1 == pytest.approx(_short(outages1, sorted({*TIMES, 8.0, 9.5})))

"""Every strategy on a small hand-computed trace; expected values worked out from the constants.

Window W = 10 h, a 2-node (16-GPU) job, checkpoint every TAU = 1 h of compute with a blocking write
W_CK = 0.1 h, restart U0 = 0.2 h, restore R = 0.1 h. One interruption at T = 3.5 h on node 0.
A run of r hours holds floor(r / (TAU + W_CK)) checkpoints.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from faultlens.ingest.errors import ConfigError
from faultlens.replay.model import JobSpec, Trace, daly_interval
from faultlens.replay.score import evaluate, replay
from faultlens.replay.strategies import STRATEGIES, resolve

W, TAU, W_CK, U0, R, T = 10.0, 1.0, 0.1, 0.2, 0.1, 3.5
C = TAU + W_CK
MEM_TAU, MEM_W, MEM_R = 0.25, 0.01, 0.05
SWAP, RECONF, STEP, MIGRATE, REPAIR = 0.05, 0.05, 0.01, 0.01, 2.0
JOB = JobSpec(
    gpus=16,
    interval_min=TAU * 60,
    checkpoint_write_s=W_CK * 3600,
    restart_s=U0 * 3600,
    restore_s=R * 3600,
    repair_h=REPAIR,
    spare_swap_s=SWAP * 3600,
    mem_interval_s=MEM_TAU * 3600,
    mem_write_s=MEM_W * 3600,
    mem_restore_s=MEM_R * 3600,
    reconfig_s=RECONF * 3600,
    step_time_s=STEP * 3600,
    migrate_s=MIGRATE * 3600,
    spares=1,
)


def trace(
    times=(T,), nodes=(0,), hardware=True, warned=False, predicted=False, false_alarms=()
) -> Trace:
    n = len(times)
    return Trace(
        t_h=np.array(times, float),
        node=np.array(nodes),
        hardware=np.full(n, hardware),
        warned=np.full(n, warned),
        predicted=np.full(n, predicted),
        span_h=W,
        fleet_nodes=2,
        false_alarm_h=np.array(false_alarms, float),
    )


def kept(r: float, tau: float = TAU, w: float = W_CK) -> float:
    """Productive hours of a run that ends without loss."""
    k = math.floor(r / (tau + w))
    return r - k * w - max(0.0, r - k * (tau + w) - tau)


def failed(r: float, tau: float = TAU, w: float = W_CK) -> float:
    """Productive hours of a run that ends in a failure (roll back to the last checkpoint)."""
    return math.floor(r / (tau + w)) * tau


def ettr(name: str, tr: Trace, job: JobSpec = JOB) -> float:
    return evaluate(resolve(name), tr, job)["productive"] / tr.span_h


def test_checkpoint_buckets():
    acc = evaluate(resolve("checkpoint"), trace(), JOB)
    assert acc["productive"] == pytest.approx(failed(T) + kept(W - T - U0 - R))  # 3.0 + 5.7
    assert acc["productive"] == pytest.approx(8.7)
    assert acc["lost_progress"] == pytest.approx(T - 3 * C)  # 0.2 h since the 3rd checkpoint
    assert acc["checkpoint_save"] == pytest.approx((3 + 5) * W_CK)
    assert acc["restart"] == pytest.approx(U0) and acc["restore"] == pytest.approx(R)
    assert acc["restarts"] == 1


def test_young_daly_uses_the_trace_mtbf():
    tau = daly_interval(W_CK, W / 1)  # one interruption in 10 h
    expected = failed(T, tau) + kept(W - T - U0 - R, tau)
    assert ettr("young-daly", trace()) == pytest.approx(expected / W)


def test_in_memory_recovers_from_peer_memory():
    expected = failed(T, MEM_TAU, MEM_W) + kept(W - T - U0 - MEM_R, MEM_TAU, MEM_W)
    assert ettr("in-memory", trace()) == pytest.approx(expected / W)  # 9.26 h
    assert expected == pytest.approx(9.26)


def test_in_memory_falls_back_to_storage_when_both_copies_are_lost():
    # node 1 is node 0's buddy and fails 0.05 h later, inside the first restart
    tr = trace(times=(T, T + 0.05), nodes=(0, 1))
    c = MEM_TAU + MEM_W
    every = round(TAU / c)  # a storage copy every 4th snapshot
    k = math.floor(T / c)
    durable = (k // every) * every  # persisted long before T
    run0 = durable * MEM_TAU
    run1 = kept(W - (T + 0.05) - U0 - R, MEM_TAU, MEM_W)
    acc = evaluate(resolve("in-memory"), tr, JOB)
    assert acc["productive"] == pytest.approx(run0 + run1)
    assert acc["restart"] == pytest.approx(0.05 + U0)  # the first restart is cut short
    assert acc["restore"] == pytest.approx(R)  # from storage


@pytest.mark.parametrize("spares", [0, 1])
def test_hot_spares(spares):
    job = JOB.with_(spares=spares, replacement="pool")
    wait = REPAIR if spares == 0 else 0.0  # with no spare, wait for the node's own repair
    expected = failed(T) + kept(W - T - wait - SWAP - R)
    acc = evaluate(resolve("hot-spares"), trace(), job)
    assert acc["productive"] == pytest.approx(expected)
    assert acc["wait_node"] == pytest.approx(wait)
    idle = spares * W - min(spares, 1) * REPAIR  # the spare is in use while node 0 is repaired
    assert acc["spare_idle"] == pytest.approx(idle)


def test_elastic_runs_on_one_node_until_the_repair():
    back = T + REPAIR
    r1 = back - (T + RECONF)  # on 1 of 2 nodes: half the throughput
    expected = (failed(T) + (T - 3 * C) - STEP) + kept(r1) * 0.5 + kept(W - back - RECONF)
    acc = evaluate(resolve("elastic"), trace(), JOB.with_(replacement="pool"))
    assert acc["productive"] == pytest.approx(expected)
    assert acc["reduced_throughput"] == pytest.approx(r1 * 0.5)
    assert acc["lost_progress"] == pytest.approx(STEP)
    assert acc["restarts"] == 1


def test_live_migration_only_helps_warned_events():
    warned = failed(T) + (T - 3 * C) + kept(W - T - MIGRATE)  # nothing lost
    assert ettr("live-migration", trace(warned=True)) == pytest.approx(warned / W)
    assert ettr("live-migration", trace()) == pytest.approx(ettr("checkpoint", trace()))


def test_predictive_drain_true_and_false_alerts():
    drain = W_CK + U0 + R  # checkpoint, requeue, restore
    run0 = failed(T) + (T - 3 * C)
    assert ettr("predictive-drain", trace(predicted=True)) == pytest.approx(
        (run0 + kept(W - T - drain)) / W
    )
    fa = 7.0
    expected = run0 + kept(fa - T - drain) + kept(W - fa - drain)
    assert ettr("predictive-drain", trace(predicted=True, false_alarms=(fa,))) == pytest.approx(
        expected / W
    )
    # a missed failure costs what it always does
    assert ettr("predictive-drain", trace()) == pytest.approx(ettr("checkpoint", trace()))


def test_hot_spares_plus_in_memory():
    expected = failed(T, MEM_TAU, MEM_W) + kept(W - T - SWAP - MEM_R, MEM_TAU, MEM_W)
    assert ettr("hot-spares+in-memory", trace()) == pytest.approx(expected / W)


def test_no_interruptions_leaves_only_checkpoint_cost():
    assert ettr("checkpoint", trace(times=(), nodes=())) == pytest.approx(kept(W) / W)


def test_registry_and_combinations():
    assert list(STRATEGIES) == [
        "checkpoint",
        "young-daly",
        "in-memory",
        "hot-spares",
        "elastic",
        "live-migration",
        "predictive-drain",
    ]
    combo = resolve("hot-spares+in-memory")
    assert (combo.node, combo.ckpt, combo.name) == ("spares", "in-memory", "hot-spares+in-memory")
    with pytest.raises(ConfigError):
        resolve("hot-spares+elastic")
    with pytest.raises(ConfigError):
        resolve("teleport")


def test_scores_are_gpu_hours_and_add_up():
    [s] = replay(trace(), ["checkpoint"], JOB, resamples=0)
    assert s.goodput_gpu_h == pytest.approx(8.7 * 16)
    assert s.goodput_gpu_h + sum(s.badput_gpu_h.values()) == pytest.approx(W * 16)
    assert s.cost_usd == pytest.approx(1.3 * 16 * JOB.usd_per_gpu_h)
    assert s.to_json()["badput_gpu_h"]["lost_progress"] == pytest.approx(0.2 * 16)

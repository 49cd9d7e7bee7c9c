"""Replay edge cases of the fleet model: events outside the window, per-event repairs carried
through resampling, GPUs per node from the trace."""

from __future__ import annotations

import numpy as np
import pytest

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


def test_pool_wait_with_each_nodes_own_repair() -> None:
    from faultlens.replay.strategies import fifo_wait, pool_wait

    t_out = np.array([0.0, 1.0, 2.0, 3.0])
    repairs = np.array([10.0, 1.5, 5.0, 1.0])
    # pool of 1: event 0 takes it (node 0 back at 10); event 1 takes the earliest return, its
    # own node (back at 2.5); event 2: every node busy, the earliest back is its own (7); event 3
    # likewise its own (4). Pending returns at each event: {10, 2.5} -> {10, 7} -> {10, 4}
    got = pool_wait(t_out, 1, repairs)
    assert got.tolist() == pytest.approx([0.0, 1.5, 5.0, 1.0])
    # no pool: each node waits for its own repair (this crashed on an empty heap before)
    assert pool_wait(t_out, 0, repairs).tolist() == pytest.approx(repairs.tolist())
    same = np.full(4, 2.0)
    assert pool_wait(t_out, 1, same).tolist() == fifo_wait(t_out, 1, 2.0).tolist()


def test_one_replacement_model_for_every_strategy() -> None:
    tr = _trace([5.0, 30.0, 60.0, 90.0], [20.0, 20.0, 20.0, 20.0])
    job = JobSpec(gpus=32, restart_s=600, spares=1)
    instant = {s.name: s for s in replay(tr, ["checkpoint", "hot-spares"], job, resamples=3)}
    assert instant["checkpoint"].badput_gpu_h["wait_node"] == 0
    assert instant["hot-spares"].badput_gpu_h["wait_node"] == 0
    pool = {
        s.name: s
        for s in replay(
            tr, ["checkpoint", "hot-spares"], job.with_(replacement="pool"), resamples=3
        )
    }
    # the whole fleet runs the job: no idle node, so checkpointing waits for each repair (the
    # last one is cut by the end of the window)
    waited_h = 3 * 20.0 + (SPAN_H - 90.0)
    assert pool["checkpoint"].badput_gpu_h["wait_node"] == pytest.approx(waited_h * 32)
    assert pool["hot-spares"].ettr > pool["checkpoint"].ettr  # the spare covers the repairs
    assert pool["hot-spares"].params["pool_nodes"] == 1
    assert pool["checkpoint"].params["repair_source"] == "trace"


def test_importing_replay_pulls_in_no_ui_library() -> None:
    import subprocess
    import sys

    code = (
        "import sys, faultlens.replay\n"
        "ui = [m for m in sys.modules if m.split('.')[0] in ('rich', 'streamlit', 'plotly')]\n"
        "print(','.join(ui))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_a_strategy_is_one_registry_entry(monkeypatch) -> None:
    from faultlens.replay import strategies as st

    monkeypatch.setitem(
        st.STRATEGIES,
        "spare-drain",
        st.Strategy("spare-drain", node=st.NodeMode.SPARES, warning=st.OnWarning.DRAIN),
    )
    s = st.resolve("spare-drain+in-memory")
    assert (s.node, s.warning, s.ckpt) == ("spares", "drain", "in-memory")
    tr = _trace([5.0, 30.0])
    (score,) = replay(tr, [s], JobSpec(gpus=32), resamples=2)
    assert score.name == "spare-drain+in-memory" and score.restarts == 2

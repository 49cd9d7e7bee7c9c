"""Event -> job linking, failure attribution in Meta's window, the taxonomy and MTBF."""

from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl

from faultlens.ingest.attribution import attribute_failures, link_events_to_jobs, mtbf, taxonomy
from faultlens.ingest.catalog import load_catalog
from faultlens.ingest.store import Store

T0 = datetime(2025, 3, 1, 0, 0, 0)
H = timedelta(hours=1)
M = timedelta(minutes=1)

# Four jobs on two nodes; three of them fail.
JOBS = [
    # job_id, nodes, n_gpus, start, end, state
    ("101", ["gpu01", "gpu02"], 16, T0, T0 + 10 * H, "NODE_FAIL"),
    ("102", ["gpu01"], 8, T0 + 11 * H, T0 + 12 * H, "FAILED"),
    ("103", ["gpu02"], 8, T0 + 11 * H, T0 + 20 * H, "COMPLETED"),
    ("104", ["gpu02"], 8, T0 + 20 * H, T0 + 22 * H, "TIMEOUT"),
]
EVENTS = [
    # ts, node, kind, code
    (T0 + 10 * H - 3 * M, "gpu02", "nccl_timeout", None),  # symptom, first
    (T0 + 10 * H - 2 * M, "gpu01", "xid", 79),  # the root cause of 101
    (T0 + 10 * H + 1 * M, "gpu01", "job_node_fail", None),
    (T0 + 12 * H - 1 * M, "gpu01", "xid", 13),  # application fault for 102
    (T0 + 15 * H, "gpu02", "ecc", None),  # during 103, outside any failure window
    (T0 + 22 * H - 20 * M, "gpu02", "xid", 48),  # before 104's window: not evidence
]


def _load(store: Store) -> None:
    store.load_xid_catalog(load_catalog())
    store.insert(
        "jobs",
        pl.DataFrame(
            [
                dict(
                    job_id=j,
                    nodes=n,
                    n_nodes=len(n),
                    n_gpus=g,
                    start=s,
                    end=e,
                    state=st,
                    elapsed_s=(e - s).total_seconds(),
                )
                for j, n, g, s, e, st in JOBS
            ]
        ),
    )
    store.insert(
        "events",
        pl.DataFrame(
            [dict(ts=t, node=n, kind=k, code=c, source="test") for t, n, k, c in EVENTS],
            schema_overrides={"code": pl.Int32},
        ),
    )


def test_events_are_linked_to_the_job_on_their_node(store: Store) -> None:
    _load(store)
    assert link_events_to_jobs(store) == len(EVENTS)
    got = dict(store.query("SELECT ts, job_id FROM events").iter_rows())
    assert got[EVENTS[1][0]] == "101"
    assert got[EVENTS[3][0]] == "102"
    assert got[EVENTS[4][0]] == "103"
    # 22h-20min on gpu02: 103 ended at 20h (+5 min grace), 104 runs from 20h.
    assert got[EVENTS[5][0]] == "104"


def test_hardware_evidence_outranks_its_symptoms(store: Store) -> None:
    _load(store)
    frame = attribute_failures(store)
    by_job = {r["job_id"]: r for r in frame.iter_rows(named=True)}
    assert set(by_job) == {"101", "102", "104"}
    assert by_job["101"]["cause"] == "gpu_hardware"
    assert by_job["101"]["evidence_code"] == 79
    assert by_job["101"]["node"] == "gpu01"
    assert by_job["101"]["gpu_hours_lost"] == 16 * 10.0
    assert by_job["102"]["cause"] == "user_unknown"  # Xid 13: the job's own code
    assert by_job["104"]["cause"] == "user_unknown"  # no evidence within the window
    assert by_job["104"]["evidence_kind"] is None
    assert store.count("attributions") == 3


def test_taxonomy_and_mtbf_shape(store: Store) -> None:
    _load(store)
    attribute_failures(store)
    tax = taxonomy(store)
    assert dict(zip(tax["cause"], tax["interruptions"], strict=True)) == {
        "user_unknown": 2,
        "gpu_hardware": 1,
    }
    assert tax.filter(pl.col("cause") == "user_unknown")["share_pct"].item() == 66.7
    m = mtbf(store)
    node_days = 2 * 22 / 24  # two nodes over the 22 h span of the history
    row = m.filter(pl.col("cause") == "all").row(0, named=True)
    assert row["failures"] == 3
    assert row["per_1000_node_days"] == round(3 * 1000 / node_days, 2)


def test_watchdog_timeout_opens_the_window_by_the_hang(store: Store) -> None:
    end = T0 + 5 * H
    hang_ms = 600_000
    store.load_xid_catalog(load_catalog())
    store.insert(
        "jobs",
        pl.DataFrame(
            [
                dict(
                    job_id="201",
                    nodes=["gpu01", "gpu02"],
                    n_gpus=16,
                    start=T0,
                    end=end,
                    state="FAILED",
                    elapsed_s=5 * 3600.0,
                )
            ]
        ),
    )
    xid_ts = end - timedelta(milliseconds=hang_ms) - 40 * timedelta(seconds=1)  # 10 min 40 s
    store.insert(
        "events",
        pl.DataFrame(
            [
                dict(ts=xid_ts, node="gpu02", kind="xid", code=79, source="kernel"),
                # the surviving ranks' watchdog (no host prefix: only the job id is known)
                dict(
                    ts=end - 20 * timedelta(seconds=1),
                    node=None,
                    kind="nccl_timeout",
                    job_id="201",
                    source="pytorch",
                    attrs=f'{{"ran_for_ms": {hang_ms + 7}, "timeout_ms": {hang_ms}}}',
                ),
            ],
            schema_overrides={"code": pl.Int32},
        ),
    )
    row = attribute_failures(store).row(0, named=True)
    assert (row["cause"], row["evidence_code"], row["node"]) == ("gpu_hardware", 79, "gpu02")
    assert row["evidence_ts"] == xid_ts


def test_nccl_ras_finding_is_a_network_symptom(store: Store) -> None:
    # Job 104 fails with only an NCCL RAS finding (a dead peer) in its window: network. Job 101's
    # Xid 79 still outranks a RAS finding seen just before it.
    _load(store)
    store.insert(
        "events",
        pl.DataFrame(
            [
                dict(ts=T0 + 22 * H - 2 * M, node="gpu02", kind="nccl_ras", source="test"),
                dict(ts=T0 + 10 * H - 4 * M, node="gpu02", kind="nccl_ras", source="test"),
            ]
        ),
    )
    by_job = {r["job_id"]: r for r in attribute_failures(store).iter_rows(named=True)}
    assert (by_job["104"]["cause"], by_job["104"]["evidence_kind"]) == ("network", "nccl_ras")
    assert (by_job["101"]["cause"], by_job["101"]["evidence_code"]) == ("gpu_hardware", 79)

"""The PyTorch watchdog family and torchrun / elastic worker failures (issue 12 item 6), from a
file written from the messages' formats, behind the prefixes they come with: every event checked
by its line number."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from faultlens.ingest.pipeline import ingest_paths
from faultlens.ingest.store import Store

DATA = Path(__file__).resolve().parents[2] / "data" / "families"
NOW = datetime(2025, 1, 1)


def _rows(store: Store) -> dict[int, dict]:
    (f,) = ingest_paths(store, [str(DATA / "torch-watchdog-elastic.log")], now=NOW).files
    assert (f.status, f.lines, f.parsed, f.noise, f.quarantined) == ("ok", 11, 10, 1, 0)
    rows = store.query("SELECT * FROM events ORDER BY line").to_dicts()
    assert len({r["line"] for r in rows}) == len(rows)
    return {r["line"]: r for r in rows}


def test_the_watchdog_family(store: Store) -> None:
    ev = _rows(store)
    got = {n: (ev[n]["kind"], ev[n]["subkind"], ev[n]["severity"]) for n in range(1, 7)}
    assert got == {
        1: ("nccl_error", "watchdog_failure", "error"),
        2: ("nccl_error", "watchdog_terminated", "error"),
        3: ("nccl_error", "flight_recorder", "info"),
        4: ("nccl_error", "flight_recorder", "info"),
        5: ("nccl_timeout", "heartbeat_timeout", "error"),
        6: ("nccl_timeout", "watchdog_stuck", "error"),
    }
    assert json.loads(ev[1]["attrs"]) == {
        "rank": 3,
        "seq_num": 52,
        "last_enqueued": 52,
        "last_completed": 51,
    }
    assert json.loads(ev[6]["attrs"])["stuck_s"] == 480
    assert ev[5]["node"] == ev[6]["node"] == "gpu-c03"  # the journal's host
    assert ev[1]["ts"].replace(year=2000) == datetime(2000, 10, 16, 9, 12, 44, 301234)
    assert ev[11]["subkind"] == "flight_recorder" and ev[11]["node"] == "gpu-c04"  # pdsh tag


def test_elastic_worker_failures_with_exit_codes_and_signals(store: Store) -> None:
    ev = _rows(store)
    failed = {n: (ev[n]["kind"], ev[n]["subkind"], ev[n]["pid"]) for n in (8, 9, 10)}
    assert failed == {
        8: ("process_failed", "elastic_worker", 12345),
        9: ("process_failed", "elastic_worker", 290),
        10: ("process_failed", "signal", 4400),
    }
    a8, a9, a10 = (json.loads(ev[n]["attrs"]) for n in (8, 9, 10))
    assert (a8["exit_code"], a8["local_rank"], a8["signal"], a8["signal_name"]) == (
        -9,
        3,
        9,
        "SIGKILL",
    )
    assert (a9["exit_code"], a9.get("signal")) == (1, None)
    assert (a10["signal"], a10["signal_name"], a10["ip"]) == (15, "SIGTERM", "10.1.2.3")
    # glog ``E0419 12:00:00.123456 tid path:line]`` and logging's ``[YYYY-MM-DD HH:MM:SS,mmm]``
    assert ev[8]["ts"].replace(year=2000) == datetime(2000, 10, 16, 9, 13, 5, 123456)
    assert ev[9]["ts"] == datetime(2024, 10, 16, 9, 13, 6, 1000)
    assert ev[9]["node"] is None  # the logger's name ``torch.distributed...:`` is no host

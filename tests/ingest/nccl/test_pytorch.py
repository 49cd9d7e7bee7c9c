"""PyTorch distributed lines: watchdog timeouts, DistBackendError, torchrun ChildFailedError."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import polars as pl

from faultlens.ingest.base import ParseContext
from faultlens.ingest.nccl import pytorch
from faultlens.ingest.pipeline import ingest_paths
from faultlens.ingest.store import Store

NOW = datetime(2025, 1, 1)
DATA = Path(__file__).resolve().parents[2] / "data" / "nccl"


def ingest_one(store: Store, path: Path, year: int | None = 2024) -> dict:
    report = ingest_paths(store, [str(path)], now=NOW, base_ctx=ParseContext(file="", year=year))
    (f,) = report.files
    assert f.status in ("ok", "partial"), f.error
    return f.to_json()


def events(store: Store, **where: str) -> list[dict]:
    frame = store.query("SELECT * FROM events ORDER BY line")
    for col, value in where.items():
        frame = frame.filter(pl.col(col) == value)
    return [{**r, "attrs": json.loads(r["attrs"] or "{}")} for r in frame.to_dicts()]


def test_new_format_watchdog_reduce_scatter(corpus: Path, store: Store) -> None:
    path = corpus / "nccl" / "nccl-watchdog-llamafactory-issue6269-reduce-scatter-timeout.log"
    f = ingest_one(store, path)
    assert (f["format"], f["lines"], f["parsed"]) == ("lines", 5, 5)
    timeouts = events(store, kind="nccl_timeout")
    assert [e["attrs"]["rank"] for e in timeouts] == [0, 4, 3]
    first = timeouts[0]
    assert first["source"] == "pytorch" and first["subkind"] == "watchdog"
    assert first["ts"] == datetime(2024, 12, 6, 18, 44, 12, 715298)
    a = first["attrs"]
    assert (a["seq_num"], a["op_type"], a["numel_in"], a["numel_out"]) == (
        7753,
        "_REDUCE_SCATTER_BASE",
        544997376,
        68124672,
    )
    assert (a["timeout_ms"], a["ran_for_ms"]) == (600000, 600061)
    exc = events(store, subkind="watchdog_exception")
    assert [e["attrs"]["rank"] for e in exc] == [0, 4]
    assert (exc[0]["attrs"]["last_enqueued"], exc[0]["attrs"]["last_completed"]) == (7755, 7752)


def test_watchdog_with_line_counter_prefix_and_short_month(corpus: Path, store: Store) -> None:
    path = corpus / "nccl" / "nccl-watchdog-llamafactory-issue7396-allreduce-timeout.log"
    ingest_one(store, path, year=2025)
    (t0, t4) = events(store, kind="nccl_timeout")
    assert t0["ts"] == datetime(2025, 3, 21, 2, 7, 8, 408271)  # "E321" = March 21
    assert (t0["attrs"]["rank"], t0["attrs"]["seq_num"], t0["attrs"]["op_type"]) == (
        0,
        1580,
        "ALLREDUCE",
    )
    assert (t4["attrs"]["rank"], t4["attrs"]["ran_for_ms"]) == (4, 600067)


def test_year_from_mtime_when_no_year_given(corpus: Path, store: Store) -> None:
    path = corpus / "nccl" / "nccl-watchdog-llamafactory-issue7396-allreduce-timeout.log"
    mtime_year = datetime.fromtimestamp(path.stat().st_mtime).year
    ingest_one(store, path, year=None)
    ts = events(store, kind="nccl_timeout")[0]["ts"]
    assert ts.month == 3 and ts.day == 21
    assert ts.year in (mtime_year, mtime_year - 1)


def test_old_format_watchdog_with_tqdm_carriage_returns(corpus: Path, store: Store) -> None:
    path = corpus / "nccl" / "nccl-watchdog-pytorch-issue118369-old-format-tqdm.log"
    f = ingest_one(store, path)
    assert (f["lines"], f["parsed"], f["quarantined"]) == (5, 5, 0)
    evs = events(store, kind="nccl_timeout")
    assert len(evs) == 5
    first = evs[0]
    assert first["ts"] is None and first["ts_flag"] == "no_ts"  # "[E ...]" carries no time
    a = first["attrs"]
    assert (a["seq_num"], a["op_type"], a["timeout_ms"], a["ran_for_ms"]) == (
        96120,
        "ALLREDUCE",
        1800000,
        25624887,
    )
    assert "numel_in" not in a
    assert evs[-1]["attrs"]["rank"] == 7 and evs[-1]["attrs"]["seq_num"] == 64088


def test_dist_backend_error_block_is_one_event(corpus: Path, store: Store) -> None:
    path = corpus / "nccl" / "nccl-issue2076-2.21.5-distbackenderror-socket-reset.log"
    f = ingest_one(store, path)
    assert (f["format"], f["lines"], f["parsed"]) == ("lines", 4, 4)
    (ev,) = events(store)
    assert (ev["kind"], ev["subkind"], ev["source"]) == ("nccl_error", "ncclRemoteError", "pytorch")
    a = ev["attrs"]
    assert a["exception"] == "DistBackendError" and a["nccl_version"] == "2.21.5"
    assert a["where"] == "/pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:268"
    assert a["last_error"].endswith("failed : Connection reset by peer")
    assert a["peer_port"] == 33759


def test_torchrun_fixture(store: Store) -> None:
    f = ingest_one(store, DATA / "torchrun-watchdog-childfailed.log")
    assert f["lines"] == 41 and f["quarantined"] == 1
    timeouts = events(store, kind="nccl_timeout")
    assert [(e["subkind"], e["attrs"]["rank"], e["attrs"]["seq_num"]) for e in timeouts] == [
        ("watchdog", 3, 42),
        ("rethrown", 3, 42),
    ]
    assert timeouts[0]["ts"] == datetime(2024, 11, 29, 13, 5, 1, 123456)
    (err,) = events(store, subkind="ncclSystemError")
    assert err["attrs"]["rank"] == 5 and err["attrs"]["nccl_version"] == "2.20.5"
    assert err["attrs"]["peer"] == "10.1.2.3" and "Software caused" in err["attrs"]["last_error"]
    failed = events(store, subkind="child_failed")
    assert [
        (e["node"], e["attrs"]["rank"], e["attrs"]["exit_code"], e["attrs"]["root_cause"])
        for e in failed
    ] == [("gpu-node-07", 5, 1, False), ("gpu-node-07", 3, -6, True)]
    # line 16, the elastic agent's own report of the same worker (glog stamp, path source)
    (worker,) = events(store, subkind="elastic_worker")
    assert (worker["line"], worker["pid"], worker["attrs"]["signal_name"]) == (16, 80750, "SIGABRT")
    assert worker["ts"] == datetime(2024, 11, 29, 13, 5, 30, 500000)
    root = failed[1]
    assert root["ts"] == datetime(2024, 11, 29, 13, 5, 29) and root["pid"] == 80750
    assert root["attrs"]["local_rank"] == 3
    (q,) = store.query("SELECT line, reason FROM quarantine").rows()
    assert q == (8, "unrecognized watchdog timeout line")


def test_glog_stamp_year_rules() -> None:
    ctx = ParseContext(file="x", year=2023)
    assert pytorch.glog_ts("1129", "13:05:01", "123456", ctx) == datetime(
        2023, 11, 29, 13, 5, 1, 123456
    )
    jan = ParseContext(file="x", mtime=datetime(2025, 1, 3))
    assert pytorch.glog_ts("1231", "23:59:59", None, jan) == datetime(2024, 12, 31, 23, 59, 59)
    assert pytorch.glog_ts("1129", "13:05:01", None, ParseContext(file="x")) is None
    assert pytorch.glog_ts("1340", "13:05:01", None, ctx) is None  # no month 13


def test_launcher_prefixes() -> None:
    p = pytorch.strip_launcher("node7: [rank3]: ncclRemoteError: x")
    assert (p.host, p.rank, p.rest) == ("node7", 3, "ncclRemoteError: x")
    p = pytorch.strip_launcher("(RayWorker pid=12, ip=10.0.0.2) [default1]:hello")
    assert (p.ray_pid, p.ray_ip, p.rank, p.actor, p.rest) == (
        12,
        "10.0.0.2",
        1,
        "RayWorker",
        "hello",
    )
    p = pytorch.strip_launcher("torch.distributed.DistBackendError: NCCL error")
    assert p.host is None and p.rest.startswith("torch.distributed")
    assert pytorch.iso_ts("[2025-03-01 12:00:05+02:00] x") == datetime(2025, 3, 1, 10, 0, 5)

"""NCCL WARN lines whose ``host:pid:tid [dev]`` header was cut, shortened or masked, PyTorch 2.3's
``Timeout at NCCL work`` and watchdog timeouts cut inside ``WorkNCCL(...)``: events with the
line they came from; the node only from a real host name; garbled lines still quarantined."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from faultlens.ingest.base import ParseContext
from faultlens.ingest.nccl import parser as nccl
from faultlens.ingest.nccl import pytorch
from faultlens.ingest.pipeline import ingest_paths
from faultlens.ingest.reader import iter_chunks

FIXTURE = Path(__file__).resolve().parents[2] / "data" / "nccl" / "warn-and-watchdog-cut.log"
NOW = datetime(2026, 3, 1, 12, 0, 0)


def test_cut_headers_and_cut_watchdog_reports(store) -> None:
    report = ingest_paths(store, [str(FIXTURE)], now=NOW, base_ctx=ParseContext(file="", year=2025))
    (f,) = report.files
    assert (f.lines, f.parsed, f.quarantined) == (9, 5, 2)
    rows = store.query(
        "SELECT line, source, kind, subkind, node, gpu, pid, ts, attrs FROM events ORDER BY line"
    ).to_dicts()
    got = {r["line"]: r for r in rows}
    assert sorted(got) == [1, 2, 3, 6, 7]
    # header removed: the WARN is kept, classified, with no node
    assert (got[1]["source"], got[1]["kind"], got[1]["subkind"], got[1]["node"]) == (
        "nccl",
        "nccl_error",
        "ibv",
        None,
    )
    # host masked: pid and device kept, node not invented from the mask
    assert (got[2]["node"], got[2]["pid"], got[2]["gpu"]) == (None, 4100, "2")
    # a collector's shortened form (host [dev], no pid:tid) behind two stamps
    assert (got[3]["node"], got[3]["pid"], got[3]["gpu"]) == ("gpu-b07", None, "6")
    assert got[3]["ts"] == datetime(2025, 2, 1, 10, 0, 0)
    assert got[3]["subkind"] == "ncclInternalError"  # retcode 3 in ncclResult_t
    # PyTorch 2.3's form of "detected by watchdog at work"
    assert (got[6]["source"], got[6]["subkind"]) == ("pytorch", "watchdog_exception")
    assert json.loads(got[6]["attrs"])["seq_num"] == 812
    # a timeout report wrapped inside WorkNCCL(...): kept, flagged truncated
    a7 = json.loads(got[7]["attrs"])
    assert (got[7]["kind"], got[7]["subkind"], a7["seq_num"], a7["truncated"]) == (
        "nccl_timeout",
        "watchdog",
        812,
        True,
    )
    q = store.query("SELECT line, reason FROM quarantine ORDER BY line").rows()
    assert q == [
        (5, "NCCL WARN line without host:pid:tid [dev] header"),
        (9, "unrecognized watchdog timeout line"),
    ]


def test_cut_headers_same_on_both_paths() -> None:
    ctx = ParseContext(file=str(FIXTURE), year=2025)
    parser = nccl.NcclParser()
    state = parser.new_state(ctx)
    result = None
    lines: list[str | None] = []
    for chunk in iter_chunks(FIXTURE):
        part = parser.parse_chunk(chunk.lines, chunk.first_line, ctx, state)
        result = part if result is None else result.merge(part)
        lines.extend(chunk.lines.to_list())
    assert result is not None
    result = result.merge(parser.finish(ctx, state))
    ref = nccl.reference_parse(lines, ctx)
    assert (result.parsed, result.quarantined) == (ref.parsed, ref.quarantined) == (5, 2)
    vec = result.tables["events"].sort("line").to_dicts()
    assert vec == ref.tables["events"].sort("line").to_dicts()
    assert [e["line"] for e in vec] == [1, 2, 3, 6, 7]


def test_srun_label_is_not_a_host(tmp_path, store) -> None:
    # srun --label puts the task number before each line; pdsh puts the host
    path = tmp_path / "job.out"
    path.write_text(
        "3: E0101 10:00:00.000000 1234 torch/distributed/elastic/multiprocessing/api.py:869]"
        " failed (exitcode: -9) local_rank: 3 (pid: 4242) of binary: /usr/bin/python3\n"
        "gpu-7: E0101 10:00:01.000000 1235 torch/distributed/elastic/multiprocessing/api.py:869]"
        " failed (exitcode: 1) local_rank: 0 (pid: 4243) of binary: /usr/bin/python3\n"
    )
    ingest_paths(store, [str(path)], now=NOW, base_ctx=ParseContext(file="", year=2025))
    rows = store.query("SELECT line, kind, node, pid FROM events ORDER BY line").rows()
    assert rows == [(1, "process_failed", None, 4242), (2, "process_failed", "gpu-7", 4243)]
    assert pytorch.strip_launcher("12: hello").host is None
    assert pytorch.strip_launcher("12: hello").rest == "hello"

"""``scontrol show node`` and ``kubectl describe`` events, field by field: every event field and
fleet field of a node block, every state the parser maps, the ``-o`` one-line form against the
block form (the pure ``parse_line`` and the chunk path must agree), sniffing, line numbers and
the accounting of blank lines, and the k8s parser's quarantine reasons. Expected values are
written from the hand-made blocks below."""

from __future__ import annotations

import json
from datetime import datetime

import polars as pl
import pytest

from faultlens.ingest.base import ParseContext, Parsed, Quarantined
from faultlens.ingest.slurm.scontrol import (
    K8sEventsParser,
    ScontrolNodeParser,
    fleet_row,
    node_block_event,
)

MTIME = datetime(2025, 2, 3, 4, 5, 6)
CTX = ParseContext(file="/logs/nodes.txt", mtime=MTIME)
P = ScontrolNodeParser()

BLOCKS = """\
NodeName=GPU-A01.cluster.example Arch=x86_64 CoresPerSocket=32
   CPUAlloc=0 CPUTot=64 CPULoad=0.10
   Gres=gpu:h100:8(S:0-1)
   NodeAddr=10.0.0.1 NodeHostName=gpu-a01
   State=DOWN+DRAIN* ThreadsPerCore=1
   Partitions=train,debug
   CfgTRES=cpu=64,mem=1000G,billing=64,gres/gpu=8
   Reason=Xid 79 GPU has fallen off the bus [root@2025-02-01T10:20:30]

NodeName=gpu-a02 Arch=x86_64
   Gres=(null)
   State=IDLE
   Partitions=cpu
   CfgTRES=cpu=64,mem=1000G,billing=64,gres/gpu=4

NodeName=gpu-a03 Arch=x86_64
   State=MIXED+DRAIN
   Reason=ecc errors
NodeName=gpu-a04 Arch=x86_64
   State=IDLE*
   Partitions=(null)
"""


def _chunk(text: str, first_line: int = 1):
    lines = pl.Series(text.splitlines(), dtype=pl.String)
    return P.parse_chunk(lines, first_line, CTX, P.new_state(CTX))


def test_block_events_field_by_field() -> None:
    res = _chunk(BLOCKS)
    ev = res.tables["events"].sort("node").to_dicts()
    assert [e["node"] for e in ev] == ["gpu-a01", "gpu-a03", "gpu-a04"]
    a01, a03, a04 = ev
    assert a01["ts"] == datetime(2025, 2, 1, 10, 20, 30) and a01["ts_flag"] is None
    assert (a01["kind"], a01["severity"], a01["code"]) == ("node_down", "error", 79)
    assert a01["subkind"] == a01["message"] == "Xid 79 GPU has fallen off the bus"
    # attrs: JSON with sorted keys (stable text, so equal records compare equal in SQL)
    assert a01["attrs"] == (
        '{"gres": "gpu:h100:8(S:0-1)", "reason_set_by": "root", "state": "DOWN+DRAIN*"}'
    )
    assert (a01["source"], a01["file"], a01["line"]) == ("slurm", "/logs/nodes.txt", 8)
    # no [user@time]: no time, kept and flagged; the reason line is the event's line
    assert (a03["kind"], a03["severity"], a03["ts"], a03["ts_flag"]) == (
        "node_drain",
        "warning",
        None,
        "no_ts",
    )
    assert (a03["subkind"], a03["code"], a03["line"]) == ("ecc errors", None, 18)
    assert json.loads(a03["attrs"]) == {"state": "MIXED+DRAIN"}
    # not responding, no reason: the message is the state, the line the block's first
    assert (a04["kind"], a04["severity"], a04["subkind"], a04["message"], a04["line"]) == (
        "node_not_responding",
        "warning",
        None,
        "IDLE*",
        19,
    )


def test_block_fleet_rows_and_accounting() -> None:
    res = _chunk(BLOCKS)
    rows = res.tables["nodes"].sort("node").to_dicts()
    got = [(r["node"], r["partition"], r["gpus"], r["line"], r["source"]) for r in rows]
    assert got == [
        ("gpu-a01", "train", 8, 1, "scontrol"),  # the first partition; GPUs from Gres
        ("gpu-a02", "cpu", 4, 10, "scontrol"),  # Gres (null): GPUs from CfgTRES
        ("gpu-a03", None, None, 16, "scontrol"),
        ("gpu-a04", None, None, 19, "scontrol"),  # Partitions=(null)
    ]
    assert [r["state"] for r in rows] == ["DOWN+DRAIN*", "IDLE", "MIXED+DRAIN", "IDLE*"]
    assert all(r["first_seen"] == r["last_seen"] == MTIME for r in rows)
    assert all(r["dataset"] == "site" and r["file"] == "/logs/nodes.txt" for r in rows)
    n = len(BLOCKS.splitlines())
    blank = sum(1 for ln in BLOCKS.splitlines() if not ln.strip())
    assert n == 21 and blank == 2
    assert res.parsed == n - blank and res.quarantine is None  # the blank lines are noise


def test_line_numbers_follow_the_chunk_offset() -> None:
    res = _chunk(BLOCKS, first_line=101)
    ev = res.tables["events"].sort("node")
    assert ev["line"].to_list() == [108, 118, 119]
    assert sorted(res.tables["nodes"]["line"].to_list()) == [101, 110, 116, 119]


def test_lines_before_the_first_block_are_noise() -> None:
    text = "some banner\n\n" + BLOCKS
    res = _chunk(text)
    assert res.parsed == 19  # the banner and the blank lines are noise
    assert sorted(res.tables["nodes"]["line"].to_list()) == [3, 12, 18, 21]


def _one_line(block: str) -> str:
    return " ".join(part.strip() for part in block.splitlines() if part.strip())


@pytest.mark.parametrize(
    "block", [b for b in BLOCKS.replace("\nNodeName", "\n\nNodeName").split("\n\n") if b.strip()]
)
def test_one_line_form_agrees_with_the_block_form(block: str) -> None:
    """``scontrol show -o node`` (one line per node) through ``parse_line`` gives the block's
    fields: the pure path against the chunk path."""
    line = _one_line(block)
    got = P.parse_line(line, CTX)
    assert isinstance(got, Parsed)
    chunk = _chunk(block)
    (fleet,) = got.rows["nodes"]
    (want,) = chunk.tables["nodes"].drop("line").to_dicts()
    assert {k: fleet.get(k) for k in want if k != "rack"} == {
        k: v for k, v in want.items() if k != "rack"
    }
    events = got.rows.get("events", [])
    if "events" in chunk.tables:
        (ev,) = events
        (cev,) = chunk.tables["events"].to_dicts()
        for key in ("ts", "ts_flag", "node", "kind", "subkind", "code", "severity", "message"):
            assert ev[key] == cev[key], key
        assert json.loads(ev["attrs"]) == json.loads(cev["attrs"])
    else:
        assert events == []


@pytest.mark.parametrize(
    ("state", "kind"),
    [
        ("DOWN", "node_down"),
        ("DOWN*", "node_down"),
        ("FAIL", "node_down"),
        ("IDLE+FAIL", "node_down"),
        ("DRAIN", "node_drain"),
        ("IDLE+DRAIN", "node_drain"),
        ("ALLOCATED+DRAINING", "node_drain"),
        ("IDLE*", "node_not_responding"),
        ("MIXED+NOT_RESPONDING", "node_not_responding"),
        ("IDLE", None),
        ("ALLOCATED", None),
        ("MIXED+COMPLETING", None),
    ],
)
def test_every_state(state: str, kind: str | None) -> None:
    ev = node_block_event({"NodeName": "n1", "State": state}, CTX)
    assert (ev["kind"] if ev else None) == kind
    if ev:
        assert ev["message"] == state and ev["subkind"] is None


def test_reason_without_a_state_is_a_drain_and_null_reasons_are_none() -> None:
    ev = node_block_event({"NodeName": "n1", "Reason": "hw check [admin@2025-01-01T00:00:00]"}, CTX)
    assert (ev["kind"], ev["subkind"], ev["ts"]) == (
        "node_drain",
        "hw check",
        datetime(2025, 1, 1),
    )
    assert json.loads(ev["attrs"]) == {"reason_set_by": "admin"}
    for empty in ("(null)", "none"):
        assert node_block_event({"NodeName": "n1", "Reason": empty}, CTX) is None
        healthy = node_block_event({"NodeName": "n1", "State": "IDLE", "Reason": empty}, CTX)
        assert healthy is None
    assert node_block_event({"NodeName": "n1"}, CTX) is None


def test_fleet_row_fields() -> None:
    ctx = ParseContext(file="f", mtime=MTIME, options={"dataset": "lab"})
    row = fleet_row(
        {
            "NodeName": "Big01.example.org",
            "Partitions": "a,b",
            "Gres": "gpu:2,gpu:b:2",
            "State": "MIXED+DRAIN",
        },
        ctx,
    )
    assert row == {
        "dataset": "lab",
        "node": "big01",
        "partition": "a",
        "gpus": 4,
        "first_seen": MTIME,
        "last_seen": MTIME,
        "source": "scontrol",
        "file": "f",
        "state": "MIXED+DRAIN",
    }
    bare = fleet_row({"NodeName": "n2"}, ParseContext(file="g"))
    assert (bare["partition"], bare["gpus"], bare["first_seen"], bare["dataset"]) == (
        None,
        None,
        None,
        "site",
    )


def test_parse_line_ignores_other_lines() -> None:
    assert P.parse_line(None, CTX) is None
    assert P.parse_line("   State=DOWN", CTX) is None
    assert P.parse_line("", CTX) is None
    healthy = P.parse_line("NodeName=n5 State=IDLE Partitions=p", CTX)
    assert set(healthy.rows) == {"nodes"} and healthy.rows["nodes"][0]["partition"] == "p"


@pytest.mark.parametrize(
    ("head", "score"),
    [
        (["NodeName=a Arch=x86_64 CoresPerSocket=1"], 0.9),
        (["", "NodeName=a CPUTot=4"], 0.9),
        (["   ", "NodeName=a State=IDLE"], 0.9),  # blank-looking lines are skipped
        (["NodeName=a CfgTRES=cpu=1"], 0.9),
        (["NodeName=a", "   State=IDLE"], 0.9),
        (["NodeName=a", "   NodeAddr=1.2.3.4"], 0.9),
        (["NodeName=a only"], 0.0),
        (["Arch=x86_64", "NodeName=a State=IDLE"], 0.0),  # a block starts at NodeName=
        ([], 0.0),
        (["NodeName=a"] + ["x"] * 60 + ["State=IDLE"], 0.0),  # only the first 50 lines
        (["NodeName=a"] + ["x"] * 48 + ["State=IDLE"], 0.9),  # the 50th line counts
        (["NodeName=a"] + ["x"] * 49 + ["State=IDLE"], 0.0),  # the 51st does not
    ],
)
def test_sniff(head: list[str], score: float) -> None:
    assert P.sniff(head, "x") == score


def test_state_carries_no_block_across_chunks() -> None:
    assert P.new_state(CTX) == {"block": None}
    assert P.finish(CTX, P.new_state(CTX)).tables == {}


K8S = """\
Events:
  Type     Reason            Age   From               Message
  ----     ------            ----  ----               -------
  Normal   Scheduled         2m    default-scheduler  Successfully assigned
  Warning  FailedScheduling  1m    default-scheduler  0/4 nodes are available
E0203 04:05:06.789012    1234 plugin.go:42] device plugin failed
I0203 04:05:06.789012    1234 plugin.go:43] fine
"""


def test_k8s_events_quarantine_warnings_and_errors_only() -> None:
    k = K8sEventsParser()
    lines = pl.Series(K8S.splitlines(), dtype=pl.String)
    res = k.parse_chunk(lines, 1, CTX, k.new_state(CTX))
    assert res.parsed == 0 and res.tables == {}
    assert res.quarantine.select("line", "reason").rows() == [
        (5, "k8s Warning event FailedScheduling: not a faultlens event kind"),
        (6, "kubelet error: not a faultlens event kind"),
    ]
    for i, line in enumerate(K8S.splitlines(), start=1):
        got = k.parse_line(line, CTX)
        if i in (5, 6):
            assert isinstance(got, Quarantined)
            assert got.reason == res.quarantine.filter(pl.col("line") == i)["reason"][0]
        else:
            assert got is None
    assert k.parse_line(None, CTX) is None
    assert k.new_state(CTX) is None and k.finish(CTX, None).tables == {}


@pytest.mark.parametrize(
    ("head", "score"),
    [
        (K8S.splitlines(), 0.5),
        (["  Normal   Pulled  1m  kubelet  ok"], 0.5),  # rows only: at least half the lines
        (["  Normal   Pulled  1m  kubelet  ok", "a", "b"], 0.0),
        (["Events:", "  Normal   Pulled  1m  kubelet  ok", "a", "b"], 0.5),
        (["Events:", "nothing"], 0.0),
        (["  Normal   Pulled  1m  kubelet  ok", "   ", "  "], 0.5),  # blank lines do not count
        (["  Normal   Pulled  1m  kubelet  ok"] + ["a"] * 48 + ["Events:"], 0.5),  # 50th line
        (["  Normal   Pulled  1m  kubelet  ok"] + ["a"] * 49 + ["Events:"], 0.0),  # 51st
        ([], 0.0),
    ],
)
def test_k8s_sniff(head: list[str], score: float) -> None:
    assert K8sEventsParser().sniff(head, "x") == score


def test_k8s_quarantine_keeps_the_first_4000_characters() -> None:
    k = K8sEventsParser()
    line = "  Warning  BackOff  1m  kubelet  " + "x" * 5000
    res = k.parse_chunk(pl.Series([line]), 1, CTX, None)
    assert res.quarantine["raw"][0] == line[:4000]

"""Phase-2 artefacts: NCCL / PyTorch job logs, telemetry, nvidia-smi inventories, topology."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from faultlens.synth import SynthConfig, generate

CFG = SynthConfig(
    n_nodes=32, days=10, seed=22, failures_per_1000_node_days=120.0, write_training=False
)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory):
    return generate(CFG, tmp_path_factory.mktemp("phase2"))


NCCL_LINE = re.compile(
    r"^gpu[0-9]{4}:[0-9]+:[0-9]+ \[[0-7]\] (?:NCCL INFO |[\w/.]+:[0-9]+ NCCL "
    r"WARN |NCCL WARN )|^NCCL version [0-9.]+\+cuda[0-9.]+$"
)
INIT = re.compile(
    r"ncclCommInitRank comm 0x[0-9a-f]+ rank ([0-9]+) nranks ([0-9]+) cudaDev "
    r"([0-7]) nvmlDev \3 busId ([0-9a-f]+) commId 0x[0-9a-f]+ - Init COMPLETE$"
)
WATCHDOG = re.compile(
    r"^\[rank([0-9]+)\]:\[E[0-9]{3,4} [0-9:.]{18} ProcessGroupNCCL\.cpp:607\] "
    r"\[Rank \1\] Watchdog caught collective operation timeout: WorkNCCL\(SeqNum="
    r"[0-9]+, OpType=ALLREDUCE, .*Timeout\(ms\)=600000\) ran for [0-9]+ "
    r"milliseconds before timing out\.$"
)


def test_nccl_logs_shapes_and_ranks(run) -> None:
    truth = run.truth
    jobs = {r["job_id"] for r in truth["interruptions"]}
    logs = sorted((run.out / "jobs").glob("*/nccl.log"))
    assert logs and jobs <= {p.parent.name for p in logs}
    for path in logs:
        ranks = {}
        for line in path.read_text().splitlines():
            assert NCCL_LINE.match(line), (path, line)
            if m := INIT.search(line):
                ranks[int(m[1])] = int(m[2])
        assert ranks and set(ranks) == set(range(next(iter(ranks.values())))), path


def _lag_s(r: dict) -> float:
    return (datetime.fromisoformat(r["end"]) - datetime.fromisoformat(r["ts"])).total_seconds()


def test_watchdog_on_surviving_ranks_when_a_gpu_hangs(run) -> None:
    hung = [
        r
        for r in run.truth["interruptions"]
        if r["n_nodes"] > 1 and r["state"] == "FAILED" and _lag_s(r) >= 590
    ]
    assert hung
    for r in hung:
        text = (run.out / "jobs" / r["job_id"] / "pytorch.log").read_text()
        lines = [ln for ln in text.splitlines() if "Watchdog caught" in ln]
        assert all(WATCHDOG.match(ln) for ln in lines)
        assert len(lines) == r["n_gpus"] - 1  # every rank but the one on the dead GPU
        assert "ChildFailedError" in text and "exitcode  : -6" in text


def test_network_failures_show_ib_errors(run) -> None:
    net = [
        r
        for r in run.truth["interruptions"]
        if r["category"] == "network"
        and r["n_nodes"] > 1
        and r["state"] == "FAILED"
        and _lag_s(r) < 590
    ]
    assert net
    for r in net:
        text = (run.out / "jobs" / r["job_id"] / "nccl.log").read_text()
        assert "NCCL WARN NET/IB : Got completion from peer" in text
        assert "status=12 opcode=0 len=0 vendor err 129" in text


def test_prometheus_export_shape_and_precursor_counters(run) -> None:
    files = sorted((run.out / "telemetry").glob("prometheus_range_*.json"))
    assert files
    series = {}
    for path in files:
        doc = json.loads(path.read_text())
        assert doc["status"] == "success" and doc["data"]["resultType"] == "matrix"
        for s in doc["data"]["result"]:
            m = s["metric"]
            assert {"__name__", "gpu", "UUID", "pci_bus_id", "Hostname", "modelName"} <= set(m)
            assert re.fullmatch(r"00000000:[0-9A-F]{2}:00\.0", m["pci_bus_id"])
            key = (m["Hostname"], m["gpu"], m["__name__"])
            series.setdefault(key, []).extend((float(t), float(v)) for t, v in s["values"])
    rising = 0
    for f in run.truth["failures"]:
        if f["cause"] != "GPU HBM3 Memory" or not f["has_precursors"]:
            continue
        pts = sorted(
            series.get((f["node"], str(f["gpu_index"]), "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"), [])
        )
        ts = datetime.fromisoformat(f["ts"]).replace(tzinfo=UTC).timestamp()
        before = [v for t, v in pts if t < ts]
        if len(before) > 2 and before[-1] > before[0]:
            rising += 1
    assert rising >= 1  # correctable ECC climbs in the hours before an uncorrectable error


def test_nvidia_smi_inventory_matches_truth_nodes(run) -> None:
    d = run.out / "telemetry" / "nvidia-smi-q"
    files = sorted(d.glob("*.txt"))
    assert [p.stem for p in files] == [n["node"] for n in run.truth["nodes"]]
    text = files[0].read_text()
    assert "==============NVSMI LOG==============" in text
    assert text.count("    GPU UUID                              : GPU-") == 8
    assert re.search(r"^GPU 00000000:18:00\.0$", text, re.M)


def test_topology_and_switch_failures(run) -> None:
    rows = (run.out / "topology.csv").read_text().splitlines()
    assert rows[0] == "node,leaf_switch,spine,rail,hca,hca_pci"
    assert len(rows) == 1 + 32 * 8
    leaf_of = {r.split(",")[0]: r.split(",")[1] for r in rows[1:]}
    switches = [f for f in run.truth["failures"] if f["leaf"]]
    assert switches  # a leaf-switch failure hits every node behind it
    for f in switches:
        if f["leaf"]:
            assert sorted(f["nodes"]) == sorted(
                n for n, leaf in leaf_of.items() if leaf == f["leaf"]
            )


def test_job_logs_are_under_jobs_folder(run) -> None:
    for p in (run.out / "jobs").rglob("*"):
        if p.is_file():
            assert p.parent.parent == run.out / "jobs" and p.parent.name.isdigit()
            assert p.name in ("nccl.log", "pytorch.log")
    assert isinstance(run.out, Path)

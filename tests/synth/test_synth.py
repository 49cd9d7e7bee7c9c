"""The synthetic cluster: determinism, calibration, precursors, lemons, job kills, real formats."""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from faultlens.ingest.schema import CauseCategory
from faultlens.synth import SynthConfig, generate, simulate
from faultlens.synth.cluster import build_nodes
from faultlens.synth.config import LLAMA3_CAUSES, LLAMA3_FAILURES_PER_1000_NODE_DAYS
from faultlens.synth.failures import sample_hw_failures
from faultlens.synth.slurm_logs import SACCT_COLUMNS, hostlist

SMALL = SynthConfig(n_nodes=48, days=14, seed=7, write_training=False)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("synth_small")
    return generate(SMALL, out)


@pytest.fixture(scope="module")
def mid():
    """A mid-size run (1,024 nodes x 60 days, ~61k node-days) for the calibration checks."""
    return simulate(SynthConfig(n_nodes=1024, days=60, seed=11))


def _primary(cluster):
    return [f for f in cluster.failures if f.primary is None]


# -- layout and determinism ------------------------------------------------------------------------


def test_layout_and_truth_keys(small) -> None:
    out = small.out
    for i in range(1, SMALL.n_nodes + 1):
        assert (out / "nodes" / f"gpu{i:04d}" / "kern.log").is_file()
    assert (out / "slurm" / "sacct.txt").is_file()
    assert (out / "slurm" / "slurmctld.log").is_file()
    truth = json.loads(small.ground_truth.read_text())
    for key in (
        "failures",
        "interruptions",
        "stragglers",
        "precursors",
        "lemon_nodes",
        "config",
        "cause_mix",
    ):
        assert key in truth
    assert truth["config"]["seed"] == 7 and truth["config"]["n_nodes"] == 48
    categories = {str(c) for c in CauseCategory}
    causes = {c.name for c in LLAMA3_CAUSES}
    for f in truth["failures"]:
        assert {"ts", "node", "gpu", "cause", "category"} <= f.keys()
        assert f["category"] in categories and f["cause"] in causes
    for r in truth["interruptions"]:
        assert {"ts", "job_id", "node", "cause"} <= r.keys()
    assert abs(sum(truth["cause_mix"].values()) - 1.0) < 1e-9
    assert small.to_json()["ground_truth"] == str(small.ground_truth)


def test_same_seed_same_bytes(tmp_path: Path) -> None:
    cfg = SynthConfig(n_nodes=16, days=3, seed=5, write_training=False)
    a = generate(cfg, tmp_path / "a")
    b = generate(cfg, tmp_path / "b")
    files_a = sorted(p.relative_to(a.out) for p in a.out.rglob("*") if p.is_file())
    files_b = sorted(p.relative_to(b.out) for p in b.out.rglob("*") if p.is_file())
    assert files_a == files_b and len(files_a) >= 19
    for rel in files_a:
        assert (a.out / rel).read_bytes() == (b.out / rel).read_bytes(), rel
    c = generate(SynthConfig(n_nodes=16, days=3, seed=6, write_training=False), tmp_path / "c")
    assert (c.out / "slurm/sacct.txt").read_bytes() != (a.out / "slurm/sacct.txt").read_bytes()


def test_start_is_an_input(tmp_path: Path) -> None:
    res = generate(
        SynthConfig(n_nodes=16, days=2, seed=1, start=datetime(2024, 6, 1), write_training=False),
        tmp_path,
    )
    first = (res.out / "slurm/slurmctld.log").read_text().splitlines()[0]
    assert first.startswith("[2024-06-0")
    # logs carry the mtime of their last write, so year-less syslog stamps resolve to 2024
    mtime = datetime(1970, 1, 1) + timedelta(seconds=(res.out / "slurm/sacct.txt").stat().st_mtime)
    assert mtime == datetime(2024, 6, 3)


# -- calibration -----------------------------------------------------------------------------------


def test_failure_rate_matches_llama3(mid) -> None:
    n = len(_primary(mid))
    node_days = 1024 * 60
    expected = LLAMA3_FAILURES_PER_1000_NODE_DAYS / 1000 * node_days  # 233
    assert abs(n - expected) < 4 * np.sqrt(expected), (n, expected)
    per_gpu_day = n / (node_days * 8)
    assert 3.9e-4 < per_gpu_day < 5.6e-4  # Llama 3: 419 / (16,384 x 54) = 4.74e-4


def test_category_shares_match_mix(mid) -> None:
    fails = _primary(mid)
    got = Counter(str(f.cause.category) for f in fails)
    total = sum(c.count for c in LLAMA3_CAUSES)
    want = Counter()
    for c in LLAMA3_CAUSES:
        want[str(c.category)] += c.count / total
    for cat, share in want.items():
        sigma = np.sqrt(share * (1 - share) / len(fails))
        assert abs(got[cat] / len(fails) - share) < max(4 * sigma, 0.02), (cat, got[cat], share)


def test_hardware_cause_shares_large_sample() -> None:
    cfg = SynthConfig(n_nodes=20000, days=60, seed=3)
    nodes = build_nodes(cfg, np.random.default_rng(0))
    fails = [
        f for f in sample_hw_failures(cfg, nodes, np.random.default_rng(1)) if f.primary is None
    ]
    hw = [c for c in LLAMA3_CAUSES if not c.needs_job]
    total = sum(c.count for c in hw)
    got = Counter(f.cause.name for f in fails)
    for c in hw:
        assert abs(got[c.name] / len(fails) - c.count / total) < 0.015, c.name
    assert got["Faulty GPU"] / len(fails) == pytest.approx(148 / total, abs=0.015)


def test_lemon_nodes_fail_more(mid) -> None:
    lemons = {nd.index for nd in mid.nodes if nd.lemon}
    assert 10 <= len(lemons) <= 20  # 1.5% of 1,024
    hw = [f for f in _primary(mid) if not f.cause.needs_job]
    on_lemons = sum(1 for f in hw if f.node in lemons)
    per_lemon = on_lemons / len(lemons)
    per_healthy = (len(hw) - on_lemons) / (1024 - len(lemons))
    assert per_lemon > 4 * per_healthy


# -- failures, precursors, jobs --------------------------------------------------------------------


def test_precursors_precede_their_failures(mid) -> None:
    by_id = {f.fid: f for f in mid.failures}
    pre = [e for e in mid.events if e.precursor]
    assert len(pre) > 100
    for e in pre:
        f = by_id[e.fid]
        assert e.ts_s < f.ts_s and e.node == f.node
    hbm = [f for f in _primary(mid) if f.cause.name == "GPU HBM3 Memory"]
    with_pre = [f for f in hbm if f.has_precursors]
    assert 0.5 < len(with_pre) / len(hbm) < 0.95  # not every failure warns
    keys = {e.key for e in pre if by_id[e.fid].cause.name == "GPU HBM3 Memory"}
    assert keys <= {"xid92", "xid63", "xid94"} and "xid63" in keys


def test_benign_precursors_exist(mid) -> None:
    benign = [
        e
        for e in mid.events
        if e.fid is None and e.key in ("xid63", "xid92", "ib_flap", "nvlink_nonfatal")
    ]
    assert len(benign) > 200  # false-positive noise on healthy hardware


def test_failures_kill_running_jobs(mid) -> None:
    killed = [j for j in mid.jobs if j.failure_cause is not None]
    assert len(killed) > 100
    for j in killed:
        assert j.state in ("NODE_FAIL", "FAILED")
        lag = j.end_s - j.failure_ts_s
        assert 0 < lag <= 700
        assert j.failure_node in j.nodes
        assert j.start_s <= j.failure_ts_s
    node_down = {c.name for c in LLAMA3_CAUSES if c.node_down}
    assert all(j.state == "NODE_FAIL" for j in killed if j.failure_cause in node_down)
    sizes = Counter(len(j.nodes) for j in mid.jobs)
    assert sizes[1] > 0.5 * len(mid.jobs) and max(sizes) >= 256  # 1 node .. a large share


def test_switch_failures_hit_every_node_behind_the_leaf(mid) -> None:
    switches = [f for f in _primary(mid) if f.variant == "switch"]
    assert switches
    for f in switches:
        shadows = [g for g in mid.failures if g.primary is f]
        leaf_nodes = [nd.index for nd in mid.nodes if nd.leaf == f.leaf]
        assert sorted([f.node] + [g.node for g in shadows]) == leaf_nodes


def test_interruptions_match_sacct(small) -> None:
    truth = small.truth
    rows = (small.out / "slurm/sacct.txt").read_text().splitlines()
    header = rows[0].split("|")
    assert tuple(header) == SACCT_COLUMNS
    jobs: dict[str, list[dict[str, str]]] = {}
    for line in rows[1:]:
        rec = dict(zip(header, line.split("|"), strict=True))
        if "." not in rec["JobID"]:
            jobs.setdefault(rec["JobID"], []).append(rec)
    assert truth["interruptions"]
    for r in truth["interruptions"]:
        recs = [x for x in jobs[r["job_id"]] if x["End"] == r["end"][:19]]
        assert len(recs) == 1
        assert recs[0]["State"] in ("NODE_FAIL", "FAILED")
        end = datetime.fromisoformat(recs[0]["End"])
        assert timedelta(0) <= end - datetime.fromisoformat(r["ts"]) <= timedelta(seconds=700)


# -- formats ---------------------------------------------------------------------------------------

_MON = "(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
SYSLOG = re.compile(
    rf"^{_MON} [ 1-3][0-9] [0-2][0-9]:[0-5][0-9]:[0-5][0-9] gpu[0-9]{{4}} "
    r"(?:kernel: \[ *[0-9]+\.[0-9]{6}\] |[A-Za-z][\w.-]*(?:\[[0-9]+\])?: )"
)
DMESG_T = re.compile(
    rf"^\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) {_MON} [ 1-3][0-9] "
    r"[0-2][0-9]:[0-5][0-9]:[0-5][0-9] 20[0-9]{2}\] |^ {20,}NVRM: "
)
JOURNAL = re.compile(
    r"^20[0-9]{2}-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-5][0-9]\+0000 "
    r"gpu[0-9]{4} [A-Za-z][\w.-]*(?:\[[0-9]+\])?: "
)
XID = re.compile(r"NVRM: Xid \(PCI:0000:[0-9a-f]{2}:00\): ([0-9]+), ")
KNOWN_XIDS = {13, 31, 43, 45, 48, 63, 64, 74, 79, 92, 94, 95, 119, 144, 145, 149}


def test_kernel_lines_in_real_shapes(small) -> None:
    formats: Counter[str] = Counter()
    xids: Counter[int] = Counter()
    total = meaningful = 0
    for path in sorted((small.out / "nodes").glob("*/kern.log")):
        lines = path.read_text().splitlines()
        first = lines[0]
        shape = DMESG_T if first.startswith("[") else JOURNAL if first[:2] == "20" else SYSLOG
        formats[shape.pattern[:8]] += 1
        for line in lines:
            assert shape.match(line), (path, line)
            m = XID.search(line)
            if m:
                xids[int(m.group(1))] += 1
            if m or "mlx5" in line or "EDAC" in line or "AER" in line or "NVRM" in line:
                meaningful += 1
        total += len(lines)
    assert len(formats) == 3  # syslog, dmesg -T and journalctl nodes
    assert set(xids) <= KNOWN_XIDS and {13, 43} <= set(xids)
    assert meaningful / total < 0.1  # mostly ordinary noise


def test_fallen_off_bus_multiline_shape() -> None:
    cfg = SynthConfig(n_nodes=64, days=60, seed=2)
    cluster = simulate(cfg)
    multi = [e for e in cluster.events if e.key == "xid79" and e.extra.get("multiline")]
    assert multi
    from faultlens.synth.kernel_logs import TEMPLATES

    node = cluster.nodes[multi[0].node]
    lines = TEMPLATES["xid79"](node, multi[0].gpu, multi[0].extra, np.random.default_rng(0))
    pci = node.gpus[multi[0].gpu].pci_bus_id
    assert lines[0] == f"NVRM: The NVIDIA GPU {pci}"
    assert lines[2] == "NVRM: fallen off the bus and is not responding to commands."
    assert lines[3].endswith("79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.")


def test_slurm_shapes(small) -> None:
    sacct = (small.out / "slurm/sacct.txt").read_text().splitlines()
    states = Counter()
    for line in sacct[1:]:
        f = line.split("|")
        assert len(f) == len(SACCT_COLUMNS)
        assert re.fullmatch(r"[0-9]+(\.(batch|extern|0))?", f[0])
        assert re.fullmatch(r"([0-9]+:[0-9]+)?", f[15])
        assert re.fullmatch(r"[0-9T:-]{19}|Unknown", f[11])
        states[f[14].split()[0]] += "." not in f[0]
    assert {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"} <= set(states)
    assert any("|CANCELLED by 10" in line for line in sacct)
    ctld = (small.out / "slurm/slurmctld.log").read_text().splitlines()
    stamp = re.compile(r"^\[20[0-9]{2}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}\] ")
    assert all(stamp.match(line) for line in ctld)
    assert any("sched: Allocate JobId=" in line for line in ctld)


def test_hostlist() -> None:
    assert hostlist(["gpu0001"]) == "gpu0001"
    assert (
        hostlist(["gpu0003", "gpu0001", "gpu0002", "gpu0004", "gpu0007"]) == "gpu[0001-0004,0007]"
    )
    assert hostlist(["gpu0010", "gpu0012"]) == "gpu[0010,0012]"

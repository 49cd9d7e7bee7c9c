"""Per-job NCCL and PyTorch logs: ``OUT/jobs/<job_id>/nccl.log`` and ``pytorch.log``.

Written for every job a failure interrupted and a sample of other multi-node jobs. ``nccl.log``
is the ``NCCL_DEBUG=INFO`` stream of all ranks (``host:pid:tid [dev] NCCL INFO ...``): bootstrap,
NET/IB devices, ``ncclCommInitRank ... rank R nranks N cudaDev D nvmlDev D busId B commId C - Init
START/COMPLETE``; around network failures and on the peers of a dead node, ``NET/IB : Got
completion from peer ... with status=12 ... vendor err 129`` and the ``-> 6`` unwinding lines; an IB
async port error when a link flaps under the job. ``pytorch.log`` is the job's stderr: when a GPU
hangs, the ProcessGroupNCCL watchdog timeouts of the surviving ranks; DistBackendError after
network errors; the slurmstepd cancellation of a NODE_FAIL; torchrun's ChildFailedError report.
A requeued job's second run is appended to the same files.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from faultlens.synth.cluster import Job, Node
from faultlens.synth.failures import KEvent

if TYPE_CHECKING:
    from faultlens.synth.generate import Cluster

NCCL_VERSION = "2.21.5"
MAX_NORMAL_JOBS = 40
GPU_CAUSES = ("gpu_hardware", "gpu_memory")


def _ip(node: Node) -> str:
    return f"10.1.{node.index // 250}.{node.index % 250 + 1}"


def _bus(node: Node, dev: int) -> str:
    return f"{int(node.gpus[dev].pci_bus_id[5:7], 16):x}000"


class _Ranks:
    """Ranks of one job run: host, pid, device per rank."""

    def __init__(self, job: Job, nodes: dict[str, Node], rng: np.random.Generator) -> None:
        self.nodes = [nodes[n] for n in job.nodes]
        per = 8 if len(job.nodes) > 1 else max(1, min(8, job.n_gpus))
        self.per = per
        self.n = per * len(self.nodes)
        base = rng.integers(10_000, 3_000_000, size=len(self.nodes))
        self.pid = [int(base[r // per]) + r % per for r in range(self.n)]
        self.tid_off = int(rng.integers(100, 900))

    def node(self, r: int) -> Node:
        return self.nodes[r // self.per]

    def prefix(self, r: int, thread: int = 0) -> str:
        pid = self.pid[r]
        return f"{self.node(r).name}:{pid}:{pid + thread} [{r % self.per}]"


def _init_lines(job: Job, rk: _Ranks, rng: np.random.Generator) -> list[str]:
    comm_id = f"0x{int(rng.integers(1, 2**62)):x}"
    out = []
    nics = " ".join(f"[{k}]mlx5_{k}:1/IB" for k in range(8))
    for r in range(rk.n):
        nd, d, p = rk.node(r), r % rk.per, rk.prefix(r)
        pt = rk.prefix(r, rk.tid_off)
        comm = f"0x{int(rng.integers(2**40, 2**44)):x}"
        out.append(f"{p} NCCL INFO Bootstrap : Using ibp{24 + d}s0:{_ip(nd)}<0>")
        out.append(f"{p} NCCL INFO cudaDriverVersion 12040")
        if r == 0:
            out.append(f"NCCL version {NCCL_VERSION}+cuda12.4")
        out.append(f"{pt} NCCL INFO NET/IB : Using {nics} [RO]; OOB ibp{24 + d}s0:{_ip(nd)}<0>")
        out.append(f"{pt} NCCL INFO Using network IB")
        init = (
            f"{pt} NCCL INFO ncclCommInitRank comm {comm} rank {r} nranks {rk.n} cudaDev {d} "
            f"nvmlDev {d} busId {_bus(nd, d)} commId {comm_id}"
        )
        out.append(init + " - Init START")
        out.append(init + " - Init COMPLETE")
    return out


def _ib_error(rk: _Ranks, r: int, peer: Node, rng: np.random.Generator) -> list[str]:
    pt = rk.prefix(r, rk.tid_off + 7)
    gid = f"fe80::a288:c203:{rk.node(r).index:x}:{r % 8:x}"
    return [
        f"{pt} transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer "
        f"{_ip(peer)}<{int(rng.integers(30000, 60000))}> with status=12 opcode=0 len=0 "
        f"vendor err 129 (Recv) localGid {gid} remoteGids fe80::a288:c203:{peer.index:x}:0",
        f"{pt} NCCL INFO transport/net.cc:1302 -> 6",
        f"{pt} NCCL INFO proxy.cc:698 -> 6",
        f"{pt} NCCL INFO proxy.cc:878 -> 6 [Progress Thread]",
    ]


def _dist_backend_error(r: int, peer: Node, rng: np.random.Generator) -> list[str]:
    stamp = f"[rank{r}]: "
    port = int(rng.integers(30000, 60000))
    return [
        stamp + "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/"
        "distributed/c10d/NCCLUtils.hpp:268, remote process exited or there was a network "
        f"error, NCCL version {NCCL_VERSION}",
        stamp + "ncclRemoteError: A call failed possibly due to a network error or a remote "
        "process exiting prematurely.",
        stamp + "Last error:",
        stamp + f"NET/IB : Got completion from peer {_ip(peer)}<{port}> with status=12 "
        "opcode=0 len=0 vendor err 129 (Recv)",
    ]


def _glog(job: Job, t_s: float) -> str:
    t = job.origin + timedelta(seconds=t_s)
    return f"E{t.month}{t.day:02d} {t:%H:%M:%S}.{t.microsecond * 1000 + 123:09d}"


def _watchdog(job: Job, rk: _Ranks, dead: set[int], t_s: float, seq: int) -> list[str]:
    out = []
    for r in range(rk.n):
        if r in dead:
            continue
        stamp = _glog(job, t_s + 0.001 * r)
        out.append(
            f"[rank{r}]:[{stamp} ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught "
            f"collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, "
            f"NumelIn=466119168, NumelOut=466119168, Timeout(ms)=600000) ran for "
            f"{600000 + r % 97} milliseconds before timing out."
        )
        out.append(
            f"[rank{r}]:[{stamp} ProcessGroupNCCL.cpp:1664] [PG 1 Rank {r}] Exception "
            f"(either an error or timeout) detected by watchdog at work: {seq}, last "
            f"enqueued NCCL work: {seq + 2}, last completed NCCL work: {seq - 1}."
        )
    return out


def _child_failed(job: Job, rk: _Ranks, r: int, t_s: float, exitcode: int) -> list[str]:
    t = job.origin + timedelta(seconds=t_s)
    sig = {-6: "Signal 6 (SIGABRT) received by PID", -9: "Signal 9 (SIGKILL) received by PID"}
    tb = f"{sig[exitcode]} {rk.pid[r]}" if exitcode in sig else "<N/A>"
    return [
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "============================================================",
        "train.py FAILED",
        "------------------------------------------------------------",
        "Failures:",
        "  <NO_OTHER_FAILURES>",
        "------------------------------------------------------------",
        "Root Cause (first observed failure):",
        "[0]:",
        f"  time      : {t:%Y-%m-%d_%H:%M:%S}",
        f"  host      : {rk.node(r).name}",
        f"  rank      : {r} (local_rank: {r % rk.per})",
        f"  exitcode  : {exitcode} (pid: {rk.pid[r]})",
        "  error_file: <N/A>",
        f"  traceback : {tb}",
        "============================================================",
    ]


def _failure_lines(job: Job, rk: _Ranks, rng: np.random.Generator) -> tuple[list[str], list[str]]:
    """(nccl lines, pytorch lines) for a run a failure ended."""
    names = [nd.name for nd in rk.nodes]
    ni = names.index(job.failure_node) if job.failure_node in names else 0
    gpu = job.failure_gpu if job.failure_gpu is not None else 0
    bad = ni * rk.per + min(gpu, rk.per - 1)
    t, end = float(job.failure_ts_s or job.start_s), float(job.end_s or job.start_s)
    nccl: list[str] = []
    torch: list[str] = []
    seq = int(rng.integers(1000, 90000))
    peer = rk.nodes[(ni + 1) % len(rk.nodes)]
    if job.state == "NODE_FAIL":
        for r in range(rk.n):
            if r // rk.per != ni and r % rk.per == 0:
                nccl += _ib_error(rk, r, rk.nodes[ni], rng)
                torch += _dist_backend_error(r, rk.nodes[ni], rng)
        if ni == 0:  # the batch host itself died: the job's output just stops
            return nccl, torch
        t_end = job.origin + timedelta(seconds=end)
        torch.append(f"srun: error: Node failure on {job.failure_node}")
        torch.append(
            f"slurmstepd: error: *** JOB {job.job_id} ON {names[0]} CANCELLED AT "
            f"{t_end:%Y-%m-%dT%H:%M:%S} DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR "
            "DETAILS ***"
        )
        return nccl, torch
    if end - t >= 590:  # a hung GPU or collective: the other ranks' watchdog fires
        torch += _watchdog(job, rk, {bad}, t + 600.0, seq)
        torch += _child_failed(job, rk, (bad + 1) % rk.n, end - 5, -6)
        return nccl, torch
    if job.failure_cause in ("Network Switch/Cable", "NIC") and len(rk.nodes) > 1:
        nccl += _ib_error(rk, bad, peer, rng)
        torch += _dist_backend_error(bad, peer, rng)
        torch += _child_failed(job, rk, bad, end - 2, 1)
        return nccl, torch
    torch += _child_failed(job, rk, bad, end - 2, -6 if job.failure_cause else 1)
    return nccl, torch


def _flap_lines(job: Job, rk: _Ranks, flaps: list[KEvent]) -> list[str]:
    out = []
    names = [nd.name for nd in rk.nodes]
    for ev in flaps:
        ni = [nd.index for nd in rk.nodes].index(ev.node)
        port = int(ev.extra.get("port", 0))
        r = ni * rk.per + min(port, rk.per - 1)
        out.append(
            f"{rk.prefix(r, rk.tid_off + 3)} NCCL WARN NET/IB : Got async event : port "
            f"error ({names[ni]} mlx5_{port})"
        )
    return out


_BANNER = [
    "*****************************************",
    "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to "
    "avoid your system being overloaded, please further tune the variable for optimal "
    "performance in your application as needed. ",
    "*****************************************",
]


def _chosen(jobs: list[Job], rng: np.random.Generator) -> list[Job]:
    failed_ids = {j.job_id for j in jobs if j.failure_cause is not None and j.end_s is not None}
    normal = sorted(
        {
            j.job_id
            for j in jobs
            if len(j.nodes) > 1 and j.job_id not in failed_ids and j.end_s is not None
        }
    )
    if len(normal) > MAX_NORMAL_JOBS:
        normal = sorted(rng.choice(normal, size=MAX_NORMAL_JOBS, replace=False).tolist())
    keep = failed_ids | set(normal)
    return [j for j in sorted(jobs, key=lambda j: (int(j.job_id), j.start_s)) if j.job_id in keep]


def write_job_logs(cluster: Cluster, out: Path, rng: np.random.Generator) -> list[Path]:
    nodes = {nd.name: nd for nd in cluster.nodes}
    flaps_by_node: dict[int, list[KEvent]] = {}
    for ev in cluster.events:
        if ev.key == "ib_flap":
            flaps_by_node.setdefault(ev.node, []).append(ev)
    texts: dict[str, tuple[list[str], list[str]]] = {}
    for job in _chosen(cluster.jobs, rng):
        rk = _Ranks(job, nodes, rng)
        nccl, torch = texts.setdefault(job.job_id, ([], []))
        nccl += _init_lines(job, rk, rng)
        end = job.end_s if job.end_s is not None else np.inf
        flaps = sorted(
            (
                ev
                for nd in rk.nodes
                for ev in flaps_by_node.get(nd.index, ())
                if job.start_s <= ev.ts_s < end
            ),
            key=lambda e: e.ts_s,
        )
        nccl += _flap_lines(job, rk, flaps)
        if job.failure_cause is not None and job.end_s is not None:
            more_nccl, more_torch = _failure_lines(job, rk, rng)
            nccl += more_nccl
            torch += (_BANNER + more_torch) if more_torch else []
    paths = []
    for job_id, (nccl, torch) in texts.items():
        d = out / "jobs" / job_id
        d.mkdir(parents=True, exist_ok=True)
        for name, lines in (("nccl.log", nccl), ("pytorch.log", torch)):
            if not lines:  # a job that ended normally printed nothing of note on stderr
                continue
            (d / name).write_text("\n".join(lines) + "\n")
            paths.append(d / name)
    return paths

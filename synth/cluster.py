"""The cluster model: nodes with 8 GPUs, jobs, failures, and a simple Slurm-like scheduler.

These are plain dataclasses so that other generators (e.g. ``synth/training.py``, which writes
training-progress logs and injects stragglers) can use them:

- ``Node``: ``name`` (``gpu0001``), ``index``, ``gpus`` (list of ``Gpu``), ``lemon`` (a node that
  fails again and again), ``boot_s`` (times the node booted, seconds since ``config.start``),
  ``nic_pci`` (PCI ids of its InfiniBand HCAs), ``leaf`` (leaf switch name, see topology).
- ``Gpu``: ``index`` 0..7, ``pci_bus_id`` (``0000:18:00.0``), ``uuid`` (``GPU-...``), ``serial``.
- ``Job``: ``job_id`` (str), ``name``, ``user``, ``uid``, ``account``, ``partition``,
  ``nodes`` (list of node names), ``n_gpus``, ``submit`` / ``start`` / ``end`` (naive UTC
  datetimes; ``end`` is ``None`` while running at the end of the window), ``state`` (Slurm state,
  e.g. ``COMPLETED``, ``NODE_FAIL``, ``CANCELLED by 1003``), ``exit_code`` (``"1:0"``,
  code:signal), ``failure_cause`` (the Llama-3 row that killed it, or ``None``),
  ``failure_node`` / ``failure_gpu`` / ``failure_ts_s``, ``restart_of`` (job id of the earlier
  run of a requeued job, which keeps the same ``job_id``), ``time_limit_s``.
- ``Failure``: ``ts_s``, ``node`` (index), ``gpu`` (index or ``None`` for host-level), ``cause``
  (a ``config.Cause``: ``name``, ``category``), ``job`` (the job it killed), ``repair_s``.

Times inside the generator are float seconds since ``config.start``; the ``*_s`` fields keep them,
the datetime properties convert.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from faultlens.synth.config import Cause, SynthConfig

# PCI bus ids of the 8 GPUs and 8 compute HCAs of an HGX H100 server.
GPU_BUSES = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")
NIC_BUSES = ("19", "29", "3b", "5c", "9b", "ac", "bb", "dc")
GPU_MODEL = "NVIDIA H100 80GB HBM3"
GPU_MODEL_B200 = "NVIDIA B200"
USERS = (
    ("alice", 1001),
    ("bob", 1002),
    ("chen", 1003),
    ("dana", 1004),
    ("eve", 1005),
    ("farid", 1006),
    ("grace", 1007),
    ("hiro", 1008),
    ("ines", 1009),
    ("jon", 1010),
    ("kira", 1011),
    ("liam", 1012),
)
ACCOUNTS = ("llm", "vision", "research", "infra")
JOB_NAMES = (
    "pretrain",
    "sft",
    "eval",
    "ablation",
    "dpo",
    "tokenize",
    "vit_train",
    "bench",
    "nccl_test",
    "distill",
    "rlhf",
    "moe_pretrain",
)


@dataclass
class Gpu:
    index: int
    pci_bus_id: str
    uuid: str
    serial: str

    @property
    def xid_pci(self) -> str:
        """The ``PCI:0000:18:00`` form the NVIDIA driver prints in Xid lines."""
        return "PCI:" + self.pci_bus_id[:-2]


@dataclass
class Node:
    name: str
    index: int
    gpus: list[Gpu]
    lemon: bool = False
    nic_pci: list[str] = field(default_factory=list)
    boot_s: list[float] = field(default_factory=list)
    leaf: str = ""
    log_format: str = "syslog"  # syslog | dmesg | journal
    gpu_model: str = GPU_MODEL  # H100 nodes report NVLink as Xid 74, B200 nodes as Xid 144-150

    @property
    def nvlink5(self) -> bool:
        return "B200" in self.gpu_model


@dataclass
class Job:
    job_id: str
    name: str
    user: str
    uid: int
    account: str
    partition: str
    nodes: list[str]
    n_gpus: int
    submit_s: float
    start_s: float
    end_s: float | None
    state: str
    exit_code: str
    time_limit_s: float
    origin: datetime
    failure_cause: str | None = None
    failure_node: str | None = None
    failure_gpu: int | None = None
    failure_ts_s: float | None = None
    restart_of: str | None = None
    previous: Job | None = field(default=None, repr=False)  # earlier run of a requeued job
    requeue: bool = False
    planned_end_s: float = 0.0
    outcome: str = "COMPLETED"  # intended natural end state (before any failure)

    @property
    def submit(self) -> datetime:
        return self.origin + timedelta(seconds=self.submit_s)

    @property
    def start(self) -> datetime:
        return self.origin + timedelta(seconds=self.start_s)

    @property
    def end(self) -> datetime | None:
        return None if self.end_s is None else self.origin + timedelta(seconds=self.end_s)


@dataclass
class Failure:
    """A root-cause failure event on a node (and GPU, where it is one)."""

    fid: int
    ts_s: float
    node: int  # node index
    gpu: int | None
    cause: Cause
    repair_s: float
    job: Job | None = field(default=None, repr=False)  # the job it killed
    variant: str = ""  # e.g. "nvlink" / "bus" for Faulty GPU, picked by the evidence model
    has_precursors: bool = False
    leaf: str | None = None  # set for switch failures that hit every node behind a leaf
    primary: Failure | None = field(default=None, repr=False)  # switch failure this node shares

    @property
    def end_s(self) -> float:
        return self.ts_s + self.repair_s

    @property
    def job_id(self) -> str | None:
        return self.job.job_id if self.job is not None else None


def build_nodes(config: SynthConfig, rng: np.random.Generator) -> list[Node]:
    """Nodes ``gpu0001``.. with GPU inventories, lemon flags, log formats and first boot times."""
    n = config.n_nodes
    width = max(4, len(str(n)))
    n_lemons = int(round(config.lemon_fraction * n))
    if n >= 16 and config.lemon_fraction > 0:
        n_lemons = max(1, n_lemons)
    lemons = set(rng.choice(n, size=n_lemons, replace=False).tolist()) if n_lemons else set()
    fmt_draw = rng.random(n)
    uuid_hex = rng.integers(0, 16, size=(n, config.gpus_per_node, 32))
    serials = rng.integers(10**12, 10**13 - 1, size=(n, config.gpus_per_node))
    boot0 = -rng.uniform(3 * 86400, 40 * 86400, size=n)
    nodes = []
    for i in range(n):
        gpus = []
        for g in range(config.gpus_per_node):
            h = "".join("0123456789abcdef"[x] for x in uuid_hex[i, g])
            uuid = f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
            gpus.append(Gpu(g, f"0000:{GPU_BUSES[g % 8]}:00.0", uuid, str(serials[i, g])))
        if fmt_draw[i] < config.dmesg_fraction:
            fmt = "dmesg"
        elif fmt_draw[i] < config.dmesg_fraction + config.journal_fraction:
            fmt = "journal"
        else:
            fmt = "syslog"
        nodes.append(
            Node(
                name=f"gpu{i + 1:0{width}d}",
                index=i,
                gpus=gpus,
                lemon=i in lemons,
                nic_pci=[f"0000:{b}:00.0" for b in NIC_BUSES],
                boot_s=[float(boot0[i])],
                leaf=f"leaf{i // config.nodes_per_leaf + 1:02d}",
                log_format=fmt,
                gpu_model=GPU_MODEL_B200 if i >= n - int(n * config.b200_fraction) else GPU_MODEL,
            )
        )
    return nodes


# -- scheduling ------------------------------------------------------------------------------------

_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
_SIZE_CUM = tuple(
    itertools.accumulate((0.70, 0.08, 0.07, 0.06, 0.04, 0.025, 0.012, 0.006, 0.004, 0.003))
)
_OUTCOMES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "PREEMPTED")
_OUTCOME_CUM = tuple(itertools.accumulate((0.72, 0.11, 0.10, 0.03, 0.02, 0.02)))


class _Uniforms:
    """Buffered draws from one generator: cheap scalar randomness inside the scheduling loop."""

    def __init__(self, rng: np.random.Generator, size: int = 8192) -> None:
        self.rng, self.size = rng, size
        self.buf: list[float] = []
        self.normals: list[float] = []

    def random(self) -> float:
        if not self.buf:
            self.buf = self.rng.random(self.size).tolist()[::-1]
        return self.buf.pop()

    def many(self, n: int) -> np.ndarray:
        return np.array([self.random() for _ in range(n)])

    def uniform(self, lo: float, hi: float) -> float:
        return lo + (hi - lo) * self.random()

    def int(self, lo: int, hi: int) -> int:
        return lo + min(int(self.random() * (hi - lo)), hi - lo - 1)

    def normal(self) -> float:
        if not self.normals:
            self.normals = self.rng.standard_normal(self.size).tolist()[::-1]
        return self.normals.pop()

    def pick(self, options: tuple, cum: tuple[float, ...]) -> Any:
        return options[min(bisect.bisect_right(cum, self.random() * cum[-1]), len(options) - 1)]


@dataclass
class _JobDraw:
    n_nodes: int
    n_gpus: int
    dur_s: float
    limit_s: float
    outcome: str
    wait_s: float
    restart_of: Job | None = None
    earliest_s: float = 0.0


class Scheduler:
    """Whole-node, first-fit list scheduling over per-node ready times, aware of hardware failures.

    A job takes the ``k`` nodes that are ready first; a hardware failure on any of its nodes while
    it runs kills it (NODE_FAIL or FAILED, end = failure + detection lag); the failed node is out of
    service until repaired. Jobs still running at the end of the window stay RUNNING.
    """

    def __init__(
        self,
        config: SynthConfig,
        nodes: list[Node],
        failures: list[Failure],
        rng: np.random.Generator,
    ) -> None:
        self.cfg, self.nodes, self.rng = config, nodes, rng
        self.horizon_s = config.days * 86400.0
        n = len(nodes)
        self.free_at = np.zeros(n)
        self.by_node: list[list[Failure]] = [[] for _ in range(n)]
        for f in sorted(failures, key=lambda f: f.ts_s):
            self.by_node[f.node].append(f)
        self.ptr = np.zeros(n, dtype=np.int64)
        self.next_fail = np.full(n, np.inf)
        for i in range(n):
            self._settle(i)
        self.jobs: list[Job] = []
        self.u = _Uniforms(rng)
        self.names = [nd.name for nd in nodes]

    def _settle(self, i: int) -> None:
        """Consume failures that happened while node ``i`` was idle before ``free_at``."""
        fl, p = self.by_node[i], int(self.ptr[i])
        while p < len(fl) and fl[p].ts_s <= self.free_at[i]:
            self.free_at[i] = max(self.free_at[i], fl[p].end_s)
            p += 1
        self.ptr[i] = p
        self.next_fail[i] = fl[p].ts_s if p < len(fl) else np.inf

    def _pick(self, k: int, earliest: float) -> tuple[np.ndarray, float]:
        n = len(self.free_at)
        while True:
            chosen = np.argpartition(self.free_at, k - 1)[:k] if k < n else np.arange(n)
            start = max(float(self.free_at[chosen].max()), earliest)
            hit = chosen[self.next_fail[chosen] < start]
            if hit.size == 0:
                return chosen, start
            for i in hit:  # failed while idle before the job could start: down until repaired
                self.free_at[i] = self.next_fail[i]
                self._settle(int(i))

    def run(self) -> list[Job]:
        pending: list[tuple[float, int, _JobDraw]] = []
        seq = 0
        while True:
            if pending and pending[0][0] <= float(np.min(self.free_at)):
                _, _, draw = heapq.heappop(pending)
            else:
                draw = self._draw()
            chosen, start = self._pick(draw.n_nodes, draw.earliest_s)
            if start >= self.horizon_s:
                if pending:
                    heapq.heappop(pending)
                    continue
                break
            job = self._place(draw, chosen, start)
            if job.requeue and job.state == "NODE_FAIL" and job.end_s is not None:
                again = _JobDraw(
                    draw.n_nodes,
                    draw.n_gpus,
                    draw.dur_s,
                    draw.limit_s,
                    draw.outcome,
                    0.0,
                    restart_of=job,
                    earliest_s=job.end_s + 120.0,
                )
                seq += 1
                heapq.heappush(pending, (again.earliest_s, seq, again))
            self.jobs.append(job)
        for i in range(len(self.nodes)):  # failures after the last job: consumed while idle
            self.free_at[i] = self.horizon_s
            self._settle(i)
        return self.jobs

    def _draw(self) -> _JobDraw:
        u, cfg = self.u, self.cfg
        n = len(self.nodes)
        k = u.pick(_SIZES, _SIZE_CUM)
        while k > n:
            k = u.pick(_SIZES, _SIZE_CUM)
        if k >= max(2, n // 2):
            k = u.int(max(1, n // 4), n // 2 + 1)  # large jobs: a share of the cluster
        n_gpus = u.pick((1, 2, 4, 8), (0.15, 0.25, 0.4, 1.0)) if k == 1 else 8 * k
        median_h = 1.5 if k == 1 else min(3.0 + 2.0 * math.log2(k), 24.0)
        dur = math.exp(math.log(median_h * 3600) + 1.1 * u.normal())
        limit = min(cfg.max_job_days * 86400, math.ceil(dur * u.uniform(1.1, 3.0) / 3600) * 3600)
        outcome = u.pick(_OUTCOMES, _OUTCOME_CUM)
        if outcome == "FAILED":  # user errors mostly fail early (Alibaba: 73% in the first 10 min)
            dur = u.uniform(20, 600) if u.random() < 0.73 else dur * u.uniform(0.05, 1)
        elif outcome in ("CANCELLED", "OUT_OF_MEMORY", "PREEMPTED"):
            dur *= u.uniform(0.05, 1.0)
        elif outcome == "TIMEOUT":
            limit = min(limit, max(3600.0, math.floor(dur / 3600) * 3600))
            dur = limit
        dur = max(30.0, min(dur, limit))
        wait = -math.log(1.0 - u.random()) * (300 + 600 * math.log2(k + 1))
        return _JobDraw(k, n_gpus, dur, float(limit), outcome, wait)

    def _place(self, draw: _JobDraw, chosen: np.ndarray, start: float) -> Job:
        rng = self.rng
        planned_end = start + draw.dur_s
        nf = self.next_fail[chosen]
        j = int(np.argmin(nf))
        job = self._new_job(draw, chosen, start, planned_end)
        f: Failure | None = None
        if nf[j] < planned_end:
            node_i = int(chosen[j])
            f = self.by_node[node_i][int(self.ptr[node_i])]
            kill_job(job, f, self.nodes[node_i].name, rng)
        else:
            job.end_s = planned_end
            job.state, job.exit_code = _natural_end(draw.outcome, self.u)
        gap = -np.log(1.0 - self.u.many(len(chosen))) * (self.cfg.idle_gap_frac * draw.dur_s)
        self.free_at[chosen] = job.end_s + np.minimum(gap, 12 * 3600)
        for i in chosen:
            self._settle(int(i))
        if job.end_s is not None and job.end_s > self.horizon_s:
            still_running(job)
            if f is not None:
                f.job = None
        return job

    def _new_job(self, draw: _JobDraw, chosen: np.ndarray, start: float, planned_end: float) -> Job:
        prev = draw.restart_of
        u = self.u
        user, uid = USERS[u.int(0, len(USERS))] if prev is None else (prev.user, prev.uid)
        names = sorted(self.names[int(i)] for i in chosen)
        return Job(
            job_id="",
            name=prev.name if prev else JOB_NAMES[u.int(0, len(JOB_NAMES))],
            user=user,
            uid=uid,
            account=prev.account if prev else ACCOUNTS[u.int(0, len(ACCOUNTS))],
            partition="gpu" if draw.n_nodes < 64 else "large",
            nodes=names,
            n_gpus=draw.n_gpus,
            submit_s=prev.submit_s if prev else max(start - draw.wait_s, -3600.0),
            start_s=start,
            end_s=None,
            state="",
            exit_code="",
            time_limit_s=draw.limit_s,
            origin=self.cfg.start,
            previous=prev,
            requeue=prev is not None
            or (draw.n_nodes >= 2 and u.random() < self.cfg.requeue_fraction),
            planned_end_s=planned_end,
            outcome=draw.outcome,
        )


def kill_job(job: Job, f: Failure, node_name: str, rng: np.random.Generator) -> None:
    """Mark ``job`` as ended by failure ``f`` (detection lag depends on how the failure shows)."""
    if f.cause.node_down:
        lag, state, code = rng.uniform(300, 400), "NODE_FAIL", "0:0"
    elif len(job.nodes) > 1 and rng.random() < 0.3:
        lag, state, code = rng.uniform(600, 660), "FAILED", "1:0"  # surviving ranks' watchdog
    else:
        lag, state, code = rng.uniform(10, 90), "FAILED", "1:0"
    job.end_s = f.ts_s + float(lag)
    job.state, job.exit_code = state, code
    job.failure_cause, job.failure_node, job.failure_gpu = f.cause.name, node_name, f.gpu
    job.failure_ts_s = f.ts_s
    f.job = job


def still_running(job: Job) -> None:
    """A job whose end falls after the window: RUNNING at the time of the dump, no interruption."""
    job.end_s, job.state, job.exit_code = None, "RUNNING", "0:0"
    job.failure_cause = job.failure_node = None
    job.failure_gpu = job.failure_ts_s = None


def _natural_end(outcome: str, u: _Uniforms) -> tuple[str, str]:
    if outcome == "COMPLETED":
        return "COMPLETED", "0:0"
    if outcome == "FAILED":
        return "FAILED", ("1:0", "1:0", "1:0", "2:0", "0:9", "0:11", "137:0")[u.int(0, 7)]
    if outcome == "CANCELLED":
        return f"CANCELLED by {USERS[u.int(0, len(USERS))][1]}", "0:15"
    if outcome == "TIMEOUT":
        return "TIMEOUT", "0:0"
    if outcome == "OUT_OF_MEMORY":
        return "OUT_OF_MEMORY", "0:125"
    return "PREEMPTED", "0:0"


def assign_job_ids(jobs: list[Job], first_id: int = 100001) -> None:
    """Job ids in submit order, as Slurm hands them out; a requeued run keeps its job's id."""
    firsts = sorted((j for j in jobs if j.previous is None), key=lambda j: (j.submit_s, j.start_s))
    for k, job in enumerate(firsts):
        job.job_id = str(first_id + k)
    for job in sorted(jobs, key=lambda j: j.start_s):
        if job.previous is not None:
            job.job_id = job.previous.job_id
            job.restart_of = job.previous.job_id

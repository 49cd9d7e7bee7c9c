"""Slurm output: a ``sacct -D --parsable2`` dump (jobs and steps) and a slurmctld log.

Shapes follow Slurm 22.05/23.x: ``code:signal`` exit codes, ``CANCELLED by <uid>``, host-list
syntax ``gpu[0001-0004,0007]``, an empty ExitCode on the batch step of a NODE_FAIL job, ``Unknown``
end of a running job, and the requeued run of a job listed again under the same id (``-D``).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

from faultlens.synth.cluster import Failure, Job, Node

SACCT_COLUMNS = (
    "JobID",
    "JobIDRaw",
    "JobName",
    "User",
    "Account",
    "Partition",
    "NodeList",
    "NNodes",
    "AllocTRES",
    "Submit",
    "Start",
    "End",
    "Elapsed",
    "Timelimit",
    "State",
    "ExitCode",
)


def hostlist(names: list[str]) -> str:
    """Compress node names to Slurm host-list syntax: ``gpu[0001-0004,0007]``."""
    if len(names) == 1:
        return names[0]
    groups: dict[tuple[str, int], list[int]] = {}
    for name in sorted(names):
        i = len(name)
        while i > 0 and name[i - 1].isdigit():
            i -= 1
        groups.setdefault((name[:i], len(name) - i), []).append(int(name[i:]))
    parts = []
    for (prefix, width), nums in groups.items():
        ranges, lo = [], nums[0]
        for a, b in zip(nums, nums[1:] + [None], strict=True):
            if b is None or b != a + 1:
                ranges.append(f"{lo:0{width}d}" if lo == a else f"{lo:0{width}d}-{a:0{width}d}")
                lo = b if b is not None else lo
        parts.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(parts)


def _ts(t: datetime | None) -> str:
    return "Unknown" if t is None else t.strftime("%Y-%m-%dT%H:%M:%S")


def _elapsed(seconds: float) -> str:
    s = max(0, int(seconds))
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return f"{d}-{h:02d}:{m:02d}:{s:02d}" if d else f"{h:02d}:{m:02d}:{s:02d}"


def _tres(n_nodes: int, n_gpus: int) -> str:
    cpus = 16 * n_gpus
    mem = 240 * n_gpus
    return f"billing={cpus},cpu={cpus},gres/gpu={n_gpus},mem={mem}G,node={n_nodes}"


def _steps(job: Job) -> list[tuple[str, str, str, str, str, str]]:
    """(suffix, name, nodes, state, exit, tres) of the batch, extern and srun steps."""
    st = job.state
    n_nodes = len(job.nodes)
    tres_all = _tres(n_nodes, job.n_gpus)
    tres_one = _tres(1, min(job.n_gpus, 8))
    if st == "RUNNING":
        return [
            ("batch", "batch", job.nodes[0], "RUNNING", "0:0", tres_one),
            ("extern", "extern", "all", "RUNNING", "0:0", tres_all),
            ("0", job.name, "all", "RUNNING", "0:0", tres_all),
        ]
    batch = {
        "COMPLETED": ("COMPLETED", "0:0"),
        "FAILED": ("FAILED", job.exit_code),
        "NODE_FAIL": ("CANCELLED", ""),
        "TIMEOUT": ("CANCELLED", "0:15"),
        "OUT_OF_MEMORY": ("OUT_OF_MEMORY", "0:125"),
        "PREEMPTED": ("CANCELLED", "0:15"),
    }
    step0 = {
        "COMPLETED": ("COMPLETED", "0:0"),
        "FAILED": ("FAILED", job.exit_code),
        "NODE_FAIL": ("CANCELLED", "0:9"),
        "TIMEOUT": ("CANCELLED", "0:15"),
        "OUT_OF_MEMORY": ("OUT_OF_MEMORY", "0:125"),
        "PREEMPTED": ("CANCELLED", "0:15"),
    }
    key = "CANCELLED" if st.startswith("CANCELLED") else st
    b = batch.get(key, ("CANCELLED", "0:15"))
    s0 = step0.get(key, ("CANCELLED", "0:15"))
    if job.exit_code == "0:11" and st == "FAILED":
        s0 = ("CANCELLED", "0:11")  # a rank that segfaulted: its srun step is CANCELLED 0:11
    ext = ("CANCELLED", "") if st == "NODE_FAIL" else ("COMPLETED", "0:0")
    return [
        ("batch", "batch", job.nodes[0], *b, tres_one),
        ("extern", "extern", "all", *ext, tres_all),
        ("0", job.name, "all", *s0, tres_all),
    ]


def sacct_text(jobs: list[Job]) -> str:
    lines = ["|".join(SACCT_COLUMNS)]
    for job in sorted(jobs, key=lambda j: (int(j.job_id), j.start_s)):
        nl = hostlist(job.nodes)
        end = job.end
        elapsed = _elapsed((job.end_s if job.end_s is not None else job.start_s) - job.start_s)
        limit = _elapsed(job.time_limit_s)
        lines.append(
            "|".join(
                (
                    job.job_id,
                    job.job_id,
                    job.name,
                    job.user,
                    job.account,
                    job.partition,
                    nl,
                    str(len(job.nodes)),
                    _tres(len(job.nodes), job.n_gpus),
                    _ts(job.submit),
                    _ts(job.start),
                    _ts(end),
                    elapsed,
                    limit,
                    job.state,
                    job.exit_code,
                )
            )
        )
        for suffix, name, nodes, state, code, tres in _steps(job):
            snl = nl if nodes == "all" else nodes
            nn = len(job.nodes) if nodes == "all" else 1
            start = job.start + timedelta(seconds=1 if suffix == "0" else 0)
            lines.append(
                "|".join(
                    (
                        f"{job.job_id}.{suffix}",
                        f"{job.job_id}.{suffix}",
                        name,
                        "",
                        job.account,
                        "",
                        snl,
                        str(nn),
                        tres,
                        _ts(start),
                        _ts(start),
                        _ts(end),
                        elapsed,
                        "",
                        state,
                        code,
                    )
                )
            )
    return "\n".join(lines) + "\n"


# -- slurmctld -------------------------------------------------------------------------------------


def _ctld_job_lines(job: Job, rng: np.random.Generator) -> list[tuple[float, str]]:
    nl = hostlist(job.nodes)
    jid = f"JobId={job.job_id}"
    out = []
    if job.restart_of is None:
        out.append(
            (
                job.submit_s,
                f"_slurm_rpc_submit_batch_job: {jid} InitPrio=4294901760 "
                f"usec={int(rng.integers(200, 2000))}",
            )
        )
    out.append(
        (
            job.start_s,
            f"sched: Allocate {jid} NodeList={nl} #CPUs={16 * job.n_gpus} "
            f"Partition={job.partition}",
        )
    )
    if job.end_s is None:
        return out
    end, st = job.end_s, job.state
    if st == "NODE_FAIL":
        node = job.failure_node or job.nodes[0]
        out.append((end - 0.2, f"error: Nodes {node} not responding, setting DOWN"))
        out.append((end - 0.1, f"Killing {jid} on failed node {node}"))
        if job.requeue:
            out.append((end, f"requeue {jid} due to failure of node {node}"))
    elif st == "TIMEOUT":
        out.append((end, f"Time limit exhausted for {jid}"))
    elif st.startswith("CANCELLED"):
        uid = st.split()[-1]
        out.append((end - 0.05, f"_slurm_rpc_kill_job: REQUEST_KILL_JOB {jid} uid {uid}"))
    if st in ("COMPLETED", "FAILED", "OUT_OF_MEMORY"):
        code, sig = (int(x) for x in job.exit_code.split(":"))
        what = f"WEXITSTATUS {code}" if sig == 0 else f"WTERMSIG {sig}"
        out.append((end, f"_job_complete: {jid} {what}"))
    if st != "NODE_FAIL":
        out.append((end + 0.001, f"_job_complete: {jid} done"))
    return out


_DRAIN_REASON = {
    "Faulty GPU": "Xid 79: GPU has fallen off the bus",
    "GPU HBM3 Memory": "Xid 95: uncontained ECC error",
    "GPU SRAM Memory": "Xid 95: uncontained ECC error",
    "GPU System Processor": "Xid 119: GSP RPC timeout",
    "GPU Thermal Interface + Sensor": "GPU thermal: fallen off the bus",
    "Network Switch/Cable": "IB link down",
    "NIC": "IB HCA fatal error",
    "SSD": "nvme I/O errors",
    "Silent Data Corruption": "dcgmi diag failed",
}


def _ctld_failure_lines(
    f: Failure, node: Node, rng: np.random.Generator
) -> list[tuple[float, str]]:
    name = node.name
    if f.repair_s <= 0:
        return []
    out = []
    if f.cause.node_down:
        out.append((f.ts_s + float(rng.uniform(60, 200)), f"error: Nodes {name} not responding"))
        if f.job is None:
            out.append(
                (
                    f.ts_s + float(rng.uniform(300, 400)),
                    f"error: Nodes {name} not responding, setting DOWN",
                )
            )
        out.append((f.end_s + 30.0, f"Node {name} now responding"))
    else:
        reason = _DRAIN_REASON.get(f.cause.name, f.cause.name)
        if f.variant == "nvlink":
            reason = "NVLink error"
        t = f.ts_s + float(rng.uniform(60, 300))
        out.append((t, f"update_node: node {name} reason set to: {reason}"))
        out.append((t + 0.001, f"update_node: node {name} state set to DRAINED"))
    out.append((f.end_s + 60.0, f"update_node: node {name} state set to IDLE"))
    return out


def slurmctld_text(
    config_start: datetime,
    horizon_s: float,
    jobs: list[Job],
    failures: list[Failure],
    nodes: list[Node],
    rng: np.random.Generator,
) -> str:
    entries: list[tuple[float, str]] = []
    for job in jobs:
        entries.extend(_ctld_job_lines(job, rng))
    for f in failures:
        entries.extend(_ctld_failure_lines(f, nodes[f.node], rng))
    entries = [e for e in entries if 0 <= e[0] < horizon_s]
    entries.sort(key=lambda e: e[0])
    ts = np.array([e[0] for e in entries])
    base = np.datetime64(config_start, "us")
    stamps = np.datetime_as_string(base + (ts * 1e6).astype("timedelta64[us]"), unit="ms")
    return "".join(f"[{s}] {msg}\n" for s, (_, msg) in zip(stamps.tolist(), entries, strict=True))


def write_slurm(
    config_start: datetime,
    horizon_s: float,
    jobs: list[Job],
    failures: list[Failure],
    nodes: list[Node],
    out_dir: Path,
    rng: np.random.Generator,
) -> list[Path]:
    d = out_dir / "slurm"
    d.mkdir(parents=True, exist_ok=True)
    sacct = d / "sacct.txt"
    sacct.write_text(sacct_text(jobs))
    ctld = d / "slurmctld.log"
    ctld.write_text(slurmctld_text(config_start, horizon_s, jobs, failures, nodes, rng))
    return [sacct, ctld]

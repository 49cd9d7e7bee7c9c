"""Generate a synthetic cluster: raw logs in the real formats plus the ground truth.

``generate(config, out_dir)`` writes::

    OUT/nodes/<node>/kern.log      kernel / syslog per node (syslog, dmesg -T or journalctl style)
    OUT/slurm/sacct.txt            sacct -D --parsable2 dump, jobs and steps
    OUT/slurm/slurmctld.log        controller log
    OUT/jobs/<job_id>/...          per-job NCCL / PyTorch logs (and training logs, synth.training)
    OUT/telemetry/...              Prometheus range exports, nvidia-smi -q inventories
    OUT/topology.csv               node -> leaf switch, spine, rail
    OUT/ground_truth.json

Every random draw comes from one ``SeedSequence(seed)`` split per component, so the same config and
seed give byte-identical files, and a component added later does not shift the others.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import shutil
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np

from faultlens.synth.cluster import Failure, Job, Node, Scheduler, assign_job_ids, build_nodes
from faultlens.synth.config import SynthConfig
from faultlens.synth.evidence import app_events, benign_events, failure_events
from faultlens.synth.failures import DAY, KEvent, place_job_failures, sample_hw_failures
from faultlens.synth.kernel_logs import write_kernel_logs
from faultlens.synth.slurm_logs import write_slurm
from faultlens.synth.truth import build_truth, write_truth

log = logging.getLogger(__name__)

# Named random streams (index into SeedSequence.spawn); append new names at the end only.
_STREAMS = (
    "nodes",
    "hw_failures",
    "scheduler",
    "sw_failures",
    "evidence",
    "benign",
    "app",
    "kernel",
    "slurm",
    "training",
    "job_logs",
    "telemetry",
)


@dataclass
class Cluster:
    """The simulated history, before any file is written."""

    config: SynthConfig
    nodes: list[Node]
    jobs: list[Job]
    failures: list[Failure]
    events: list[KEvent]


@dataclass
class SynthResult:
    out: Path
    files: list[Path]
    ground_truth: Path
    truth: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "out": str(self.out),
            "files": [str(p) for p in self.files],
            "ground_truth": str(self.ground_truth),
        }


def _streams(seed: int) -> dict[str, np.random.SeedSequence]:
    children = np.random.SeedSequence(seed).spawn(len(_STREAMS))
    return dict(zip(_STREAMS, children, strict=True))


def simulate(config: SynthConfig) -> Cluster:
    """The whole history in memory: nodes, failures, jobs, kernel events."""
    ss = _streams(config.seed)
    rng = {k: np.random.default_rng(v) for k, v in ss.items()}
    nodes = build_nodes(config, rng["nodes"])
    hw = sample_hw_failures(config, nodes, rng["hw_failures"])
    jobs = Scheduler(config, nodes, hw, rng["scheduler"]).run()
    assign_job_ids(jobs)
    sw = place_job_failures(config, nodes, jobs, len(hw), rng["sw_failures"])
    failures = sorted(hw + sw, key=lambda f: (f.ts_s, f.node))
    events = failure_events(failures, nodes, rng["evidence"], config.warning_lead_scale)
    events += benign_events(config, nodes, rng["benign"])
    events += app_events(jobs, nodes, rng["app"])
    events = _visible(config, events, failures)
    return Cluster(config, nodes, jobs, failures, events)


def _visible(config: SynthConfig, events: list[KEvent], failures: list[Failure]) -> list[KEvent]:
    """Events inside the window, and not while their node is powered off."""
    down: dict[int, list[tuple[float, float]]] = {}
    for f in failures:
        if f.cause.node_down and f.repair_s > 0:
            down.setdefault(f.node, []).append((f.ts_s + 1.0, f.end_s))
    horizon = config.days * DAY
    out = []
    for ev in events:
        if not 0 <= ev.ts_s < horizon:
            continue
        if any(a <= ev.ts_s < b for a, b in down.get(ev.node, ())):
            continue
        out.append(ev)
    out.sort(key=lambda e: (e.ts_s, e.node))
    return out


def _stragglers(cluster: Cluster, out_dir: Path, rng: np.random.Generator) -> list[dict]:
    """Hook: ``synth.training.write(jobs, nodes, rng, out_dir, config)`` when that module exists."""
    module = "faultlens.synth.training"
    if not cluster.config.write_training or importlib.util.find_spec(module) is None:
        return []
    training = importlib.import_module(module)
    return list(training.write(cluster.jobs, cluster.nodes, rng, out_dir, cluster.config))


def generate(config: SynthConfig, out_dir: Path | str) -> SynthResult:
    """Simulate and write every file; returns the paths and the ground truth."""
    out = Path(out_dir)
    _clear_previous(out)
    out.mkdir(parents=True, exist_ok=True)
    cluster = simulate(config)
    ss = _streams(config.seed)
    files = write_kernel_logs(
        config, cluster.nodes, cluster.events, cluster.failures, out, ss["kernel"]
    )
    files += write_slurm(
        config.start,
        config.days * DAY,
        cluster.jobs,
        cluster.failures,
        cluster.nodes,
        out,
        np.random.default_rng(ss["slurm"]),
    )
    files += _phase2(cluster, out, ss)
    stragglers = _stragglers(cluster, out, np.random.default_rng(ss["training"]))
    truth = build_truth(
        config, cluster.nodes, cluster.jobs, cluster.failures, cluster.events, stragglers
    )
    gt = write_truth(truth, out)
    _set_mtimes(config, out)
    files = sorted(p for name in OUTPUTS[:-1] for p in _files_under(out / name))
    return SynthResult(out, files, gt, truth)


# What a synth run writes at the top of its output folder (ground truth last).
OUTPUTS = ("nodes", "slurm", "jobs", "telemetry", "topology.csv", "ground_truth.json")


def _files_under(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else []


def _clear_previous(out: Path) -> None:
    """Remove the outputs of an earlier run in ``out`` (only ours, and only if it was a synth
    folder), so that a smaller second run leaves no stale node logs behind."""
    if not (out / OUTPUTS[-1]).is_file():
        return
    for name in OUTPUTS:
        p = out / name
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


def _phase2(cluster: Cluster, out: Path, ss: dict[str, np.random.SeedSequence]) -> list[Path]:
    files: list[Path] = []
    try:
        from faultlens.synth import topology
    except ImportError:  # phase 2 modules are optional while they are being written
        return files
    files.append(topology.write_topology(cluster.nodes, out))
    if cluster.config.write_job_logs:
        from faultlens.synth.nccl_logs import write_job_logs

        files += write_job_logs(cluster, out, np.random.default_rng(ss["job_logs"]))
    if cluster.config.write_telemetry:
        from faultlens.synth.telemetry import write_telemetry

        files += write_telemetry(cluster, out, np.random.default_rng(ss["telemetry"]))
    return files


def _set_mtimes(config: SynthConfig, out: Path) -> None:
    """Give every log the modification time of its last write (the end of the window), so that
    year-less syslog stamps resolve to the right year as they would on a real node."""
    end = config.start + timedelta(days=config.days)
    epoch = (end - config.start.__class__(1970, 1, 1)).total_seconds()
    for p in out.rglob("*"):
        if p.is_file():
            os.utime(p, (epoch, epoch))

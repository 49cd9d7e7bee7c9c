"""Configuration of the synthetic cluster and the calibrated failure model.

The cause mix is the Llama 3 table (arXiv 2407.21783, Table 5: 419 unexpected interruptions over
54 days on 16,384 H100 GPUs), by counts. The default rate is the same source's
419 / (2,048 nodes x 54 d) = 3.79 failures per 1000 node-days (4.74e-4 per GPU-day); Meta's RSC-1
figure (6.50 per 1000 node-days, Kokolis et al. HPCA 2025) can be passed instead. Lemon nodes
(about 2% of nodes in Meta's report) fail several times more often than the rest.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from faultlens.ingest.schema import CauseCategory

LLAMA3_FAILURES_PER_1000_NODE_DAYS = 419 / (2048 * 54) * 1000  # 3.79
META_RSC1_FAILURES_PER_1000_NODE_DAYS = 6.50


@dataclass(frozen=True)
class Cause:
    """One row of the Llama 3 root-cause table, with how it shows up in our logs.

    ``needs_job``: the failure only happens inside a running job (software) and is placed in busy
    node time; otherwise it is a node-level hardware event that may also hit an idle node.
    ``node_down``: the node stops responding (Slurm NODE_FAIL) rather than the job crashing
    (FAILED). ``repair_h``: median hours before the node is back in service.
    ``precursor_p``: probability that the failure has precursor events in the logs before it.
    """

    name: str
    category: CauseCategory
    count: int
    needs_job: bool = False
    node_down: bool = False
    repair_h: float = 12.0
    precursor_p: float = 0.0


G, M, N, S, H, U = (
    CauseCategory.GPU_HARDWARE,
    CauseCategory.GPU_MEMORY,
    CauseCategory.NETWORK,
    CauseCategory.SOFTWARE,
    CauseCategory.HOST,
    CauseCategory.USER_UNKNOWN,
)

# Llama 3 Table 5 rows (counts sum to 419). Category mapping to CauseCategory: GPU rows ->
# gpu_hardware except HBM3 / SRAM -> gpu_memory; "Network switch/cable" and NIC -> network (the
# fabric, as faultlens' taxonomy groups IB / NVLink / switch / HCA); software bug, dependency and
# NCCL watchdog timeouts -> software (the "NCCL / software"); host rows and unplanned host
# maintenance -> host.
#
# precursor_p: the share of failures of a cause that leave warning signs in the logs hours to days
# before. No published figure gives these shares (reference/published-figures.md has none: its
# section D reports predictor precision, section A the cause mix), so every value is [assumed],
# set from what each failure mechanism is known to do:
# - HBM3 0.8: NVIDIA's A100/H100 memory-error guide describes the escalation correctable ECC ->
#   row remapping (Xid 63) -> contained / uncontained errors; Delta (section A4) finds row
#   remapping absorbing 92% of H100 uncorrectable errors, i.e. most bad rows announce themselves.
# - Faulty GPU: by variant (VARIANT_PRECURSOR_P): NVLink link loss 0.9 (CRC / replay errors and
#   non-fatal Xid 74 climb first), fall off the bus 0.5 (Xid 79 is often sudden; Meta sees PCIe
#   errors *co-occur* with it, section A2, which is not the same as preceding it).
# - Thermal interface 0.85: the GPU runs hot and throttles for hours before it drops.
# - SRAM 0.6, GSP 0.5: contained SRAM errors and GSP RPC timeouts sometimes repeat before the
#   fatal one, often not (Delta: GSP the most error-prone component, many errors isolated).
# - Host: system memory 0.75 (EDAC correctable errors before an uncorrectable one), SSD 0.6 (NVMe
#   timeouts; Backblaze flags drives on SMART counters, section D), CPU 0.4 (corrected MCEs),
#   chassis / IO board 0.3 (corrected AER), power supply 0.
# - Host maintenance, silent data corruption, software: 0 (nothing in the logs warns).
# Weighted by the table's counts, about 0.6 of the node hardware failures (GPU + host rows) warn:
# the recall any honest predictor can reach on this cluster is bounded near there.
LLAMA3_CAUSES: tuple[Cause, ...] = (
    Cause("Faulty GPU", G, 148, repair_h=24.0, precursor_p=0.6),
    Cause("GPU HBM3 Memory", M, 72, repair_h=24.0, precursor_p=0.8),
    Cause("Software Bug", S, 54, needs_job=True, repair_h=0.0, precursor_p=0.0),
    Cause("Network Switch/Cable", N, 35, repair_h=4.0, precursor_p=0.5),
    Cause("Host Maintenance", H, 32, node_down=True, repair_h=6.0),
    Cause("GPU SRAM Memory", M, 19, repair_h=24.0, precursor_p=0.6),
    Cause("GPU System Processor", G, 17, repair_h=2.0, precursor_p=0.5),
    Cause("NIC", N, 7, repair_h=12.0, precursor_p=0.4),
    Cause("NCCL Watchdog Timeouts", S, 7, needs_job=True, repair_h=0.0),
    Cause("Silent Data Corruption", G, 6, repair_h=24.0),
    Cause("GPU Thermal Interface + Sensor", G, 6, repair_h=12.0, precursor_p=0.85),
    Cause("SSD", H, 3, repair_h=24.0, precursor_p=0.6),
    Cause("Power Supply", H, 3, node_down=True, repair_h=12.0),
    Cause("Server Chassis", H, 2, node_down=True, repair_h=48.0, precursor_p=0.3),
    Cause("IO Expansion Board", H, 2, node_down=True, repair_h=24.0, precursor_p=0.3),
    Cause("Dependency", S, 2, needs_job=True, repair_h=0.0),
    Cause("CPU", H, 2, node_down=True, repair_h=48.0, precursor_p=0.4),
    Cause("System Memory", H, 2, node_down=True, repair_h=12.0, precursor_p=0.75),
)
# Where a cause's variants warn differently, the variant's share overrides the cause's (see above).
VARIANT_PRECURSOR_P: dict[tuple[str, str], float] = {
    ("Faulty GPU", "nvlink"): 0.9,
    ("Faulty GPU", "bus"): 0.5,
}


def default_warning_share(causes: tuple[Cause, ...]) -> float:
    """Count-weighted precursor probability over the node hardware causes (not software)."""
    hw = [c for c in causes if not c.needs_job]
    return sum(c.count * c.precursor_p for c in hw) / max(sum(c.count for c in hw), 1)


@dataclass
class SynthConfig:
    """Everything the generator needs; same config + same seed -> byte-identical output."""

    n_nodes: int = 256
    days: float = 60.0
    seed: int = 0
    start: datetime = datetime(2025, 1, 1)
    gpus_per_node: int = 8
    b200_fraction: float = 0.125  # the last nodes are B200 (NVLink5 Xids 144-150)
    failures_per_1000_node_days: float = LLAMA3_FAILURES_PER_1000_NODE_DAYS
    causes: tuple[Cause, ...] = LLAMA3_CAUSES
    lemon_fraction: float = 0.015  # Meta flagged ~40 of ~2,000 RSC-1 nodes
    lemon_multiplier: float = 8.0  # lemon hardware failure rate / healthy node rate
    # Failure timing and repairs (``synth.profile`` sets them from a real trace): the time between
    # failures of a node is Weibull with this shape (1: Poisson); repairs are log-normal around
    # each cause's median (or ``repair_median_h`` for all) with this sigma.
    interfailure_shape: float = 1.0
    repair_median_h: float | None = None
    repair_sigma: float = 0.6
    # False-positive precursor episodes on healthy hardware, per node-day [assumed]: one isolated
    # correctable-error / link-flap episode per node every ~7 weeks; a share of them
    # (benign_burst_share, 1%) are bursts that look like a failing part's escalation and lead
    # nowhere.
    benign_episodes_per_node_day: float = 0.02
    benign_burst_share: float = 0.01
    # Ordinary log lines per node-day (systemd, sshd, cron, kernel chatter).
    noise_lines_per_node_day: float = 24.0
    # Share of nodes by kernel-log format; the rest use RFC 3164 syslog.
    dmesg_fraction: float = 0.1
    journal_fraction: float = 0.1
    # Jobs.
    idle_gap_frac: float = 0.08  # mean idle gap after a job, relative to its duration
    max_job_days: float = 7.0  # partition time limit (Meta: 7-day maximum lifetime)
    requeue_fraction: float = 0.25  # NODE_FAIL jobs submitted with --requeue
    # Phase 2 artefacts.
    telemetry_interval_min: float = 30.0
    write_job_logs: bool = True
    write_training: bool = True  # call the synth.training hook (training logs, stragglers)
    write_telemetry: bool = True
    nodes_per_leaf: int = 16
    switch_share: float = 0.15  # share of network failures that take a whole leaf switch down
    # Warnings: ``warning_share`` None keeps each cause's precursor_p (about 0.6 of node hardware
    # failures warn, ``default_warning_share``); a share scales every cause's probability by
    # share / default (capped at 1), e.g. 0.15 for the real-trace profile. ``warning_lead_scale``
    # multiplies every precursor's lead time (0.5: warnings come half as early).
    warning_share: float | None = None
    warning_lead_scale: float = 1.0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["start"] = self.start.isoformat()
        d["causes"] = [{**asdict(c), "category": str(c.category)} for c in self.causes]
        return d

    @property
    def node_days(self) -> float:
        return self.n_nodes * self.days

    def precursor_scale(self) -> float:
        """Factor on every cause's precursor probability (1 unless ``warning_share`` is set)."""
        if self.warning_share is None:
            return 1.0
        return self.warning_share / default_warning_share(self.causes)

    def cause_mix(self) -> dict[str, float]:
        """Configured share of each cause (by count)."""
        total = sum(c.count for c in self.causes)
        return {c.name: c.count / total for c in self.causes}

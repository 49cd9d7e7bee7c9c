"""Kernel-log evidence of failures, precursors, benign episodes and application faults.

Produces ``KEvent`` records (what happened, when, on which GPU); ``kernel_logs`` turns them into
text. Keys used here are the template names in ``kernel_logs.TEMPLATES``.
"""

from __future__ import annotations

import numpy as np

from faultlens.synth.cluster import Failure, Job, Node
from faultlens.synth.config import SynthConfig
from faultlens.synth.failures import DAY, HOUR, KEvent

# What each cause's failure looks like at the moment it happens (key list per variant).
_AT_FAILURE: dict[tuple[str, str], list[str]] = {
    ("Faulty GPU", "bus"): ["xid79"],
    ("Faulty GPU", "nvlink"): ["nvlink_fatal", "xid45"],
    ("GPU HBM3 Memory", "uncontained"): ["xid95", "xid63", "xid45"],
    ("GPU HBM3 Memory", "dbe"): ["xid48", "xid64", "xid45"],
    ("GPU SRAM Memory", ""): ["xid95_sram", "xid45"],
    ("GPU System Processor", ""): ["xid119", "reset_required"],
    ("GPU Thermal Interface + Sensor", ""): ["xid79"],
    ("Network Switch/Cable", "link"): ["ib_down"],
    ("Network Switch/Cable", "switch"): ["ib_down_all"],
    ("NIC", "link"): ["mlx5_fatal", "ib_down"],
    ("SSD", ""): ["nvme_timeout", "io_error", "ext4_error"],
    ("Server Chassis", ""): ["aer_fatal"],
    ("IO Expansion Board", ""): ["aer_fatal"],
    ("CPU", ""): ["mce_fatal"],
    ("System Memory", ""): ["edac_ue"],
    ("Software Bug", "app_fault"): ["xid13", "xid43"],
}

# Precursor episodes: (key, fewest and most events, earliest and latest lead time in hours before
# the failure). A part on its way out escalates: several warnings of one or more kinds over hours
# to days (correctable ECC, then row remaps, then a contained error before the uncontained one;
# repeated non-fatal NVLink errors before link loss; corrected AER errors before the GPU drops
# off the bus), where a healthy part's blip is one or two isolated lines (``benign_events``).
_PRECURSORS: dict[str, list[tuple[str, int, int, float, float]]] = {
    "Faulty GPU/bus": [("aer_corrected", 3, 8, 2, 48)],
    "Faulty GPU/nvlink": [("nvlink_nonfatal", 3, 8, 1, 36)],
    "GPU HBM3 Memory": [("xid92", 1, 3, 12, 72), ("xid63", 2, 4, 4, 60), ("xid94", 0, 1, 0.5, 6)],
    "GPU SRAM Memory": [("xid94_sram", 2, 4, 1, 24)],
    "GPU System Processor": [("xid119", 2, 4, 2, 48)],
    "Network Switch/Cable": [("ib_flap", 1, 3, 0.5, 24)],
    "NIC": [("ib_flap", 1, 2, 1, 24), ("mlx5_module_temp", 1, 1, 1, 12)],
    "SSD": [("nvme_timeout", 3, 6, 2, 72)],
    "Server Chassis": [("aer_corrected", 3, 6, 2, 48)],
    "IO Expansion Board": [("aer_corrected", 3, 6, 2, 48)],
    "CPU": [("mce_corrected", 3, 6, 6, 72)],
    "System Memory": [("edac_ce", 3, 8, 6, 96)],
    "GPU Thermal Interface + Sensor": [("thermal_only", 1, 1, 2, 24)],  # telemetry, not kernel
}

# Benign episodes on healthy hardware (false-positive precursors), with relative weights.
_BENIGN = (
    ("xid92", 1.0),
    ("xid63", 1.0),
    ("nvlink_nonfatal", 1.0),
    ("ib_flap", 3.0),
    ("aer_corrected", 2.0),
    ("edac_ce", 1.0),
    ("xid119", 0.3),
    ("nvme_timeout", 0.5),
    ("cpu_throttle", 1.0),
    ("hung_task", 0.5),
)
_GPU_KEYS = {"xid92", "xid63", "xid94", "xid94_sram", "nvlink_nonfatal", "xid119", "aer_corrected"}


def failure_events(
    failures: list[Failure], nodes: list[Node], rng: np.random.Generator, lead_scale: float = 1.0
) -> list[KEvent]:
    out: list[KEvent] = []
    for f in failures:
        node = nodes[f.node]
        fid = f.primary.fid if f.primary is not None else f.fid
        keys = _AT_FAILURE.get((f.cause.name, f.variant), _AT_FAILURE.get((f.cause.name, ""), []))
        for k, key in enumerate(keys):
            if key == "xid45" and f.job is None:
                continue
            extra = {"multiline": bool(rng.random() < 0.3)} if key == "xid79" else {}
            if key in ("ib_down", "ib_down_all", "mlx5_fatal"):
                extra["port"] = int(rng.integers(len(node.nic_pci)))
            out.append(
                KEvent(
                    f.ts_s + k * float(rng.uniform(0.001, 2.0)),
                    f.node,
                    f.gpu,
                    key,
                    fid,
                    extra=extra,
                )
            )
        if f.cause.name in ("Network Switch/Cable", "NIC") and f.repair_s > 0:
            port = out[-1].extra.get("port", 0) if out else 0
            out.append(KEvent(f.end_s, f.node, None, "ib_up", fid, extra={"port": port}))
        if f.repair_s > 0 and f.variant != "switch":
            node.boot_s.append(f.end_s)  # hardware repairs end with a reboot
        if f.has_precursors:
            out.extend(_precursors(f, node, rng, lead_scale))
    return out


def _precursors(
    f: Failure, node: Node, rng: np.random.Generator, lead_scale: float = 1.0
) -> list[KEvent]:
    name = f.cause.name
    key = f"{name}/{f.variant}" if f"{name}/{f.variant}" in _PRECURSORS else name
    out = []
    for pkey, n_min, n_max, lo_h, hi_h in _PRECURSORS.get(key, []):
        n = int(rng.integers(n_min, n_max + 1))
        leads = np.sort(rng.uniform(lo_h, hi_h, size=n))[::-1] * lead_scale
        for lead in leads:
            extra = {"port": int(rng.integers(len(node.nic_pci)))} if pkey == "ib_flap" else {}
            out.append(
                KEvent(
                    max(f.ts_s - lead * HOUR, -DAY + 1.0),
                    f.node,
                    f.gpu,
                    pkey,
                    f.fid,
                    precursor=True,
                    extra=extra,
                )
            )
    return out


def benign_events(config: SynthConfig, nodes: list[Node], rng: np.random.Generator) -> list[KEvent]:
    """Precursor-like episodes on hardware that does not fail (the false-positive noise): one or
    two isolated events, or with probability ``benign_burst_share`` a burst of three to six that
    looks like a failing part and leads nowhere."""
    keys = [k for k, _ in _BENIGN]
    w = np.array([x for _, x in _BENIGN])
    w /= w.sum()
    n = int(rng.poisson(config.benign_episodes_per_node_day * config.node_days))
    node_i = rng.integers(len(nodes), size=n)
    ts = rng.uniform(0, config.days * DAY, size=n)
    kinds = rng.choice(len(keys), size=n, p=w)
    out = []
    for i, t, k in zip(node_i.tolist(), ts.tolist(), kinds.tolist(), strict=True):
        key = keys[k]
        gpu = int(rng.integers(len(nodes[i].gpus))) if key in _GPU_KEYS else None
        burst = rng.random() < config.benign_burst_share
        reps = int(rng.integers(3, 7)) if burst else int(rng.integers(1, 3))
        for r in range(reps):
            extra = {"port": int(rng.integers(8))} if key == "ib_flap" else {}
            out.append(
                KEvent(t + r * float(rng.uniform(60, 4 * HOUR)), i, gpu, key, None, extra=extra)
            )
    return out


def app_events(jobs: list[Job], nodes: list[Node], rng: np.random.Generator) -> list[KEvent]:
    """Application-caused Xids: user jobs that crash (Xid 13/31, then 43) and kills (Xid 45)."""
    index = {nd.name: nd.index for nd in nodes}
    out = []
    for job in jobs:
        if job.end_s is None or job.failure_cause is not None:
            continue
        node = index[job.nodes[0]]
        gpu = int(rng.integers(max(1, min(8, job.n_gpus))))
        pid = int(rng.integers(2000, 4_000_000))
        extra = {"pid": pid, "name": "python"}
        if job.state == "FAILED" and rng.random() < 0.2:
            key = "xid31" if rng.random() < 0.5 else "xid13"
            t = job.end_s - float(rng.uniform(2, 30))
            out.append(KEvent(t, node, gpu, key, extra=extra))
            out.append(KEvent(t + 0.01, node, gpu, "xid43", extra=extra))
        elif job.state.startswith("CANCELLED") and rng.random() < 0.05:
            out.append(KEvent(job.end_s - 1.0, node, gpu, "xid45", extra=extra))
    return out

"""GPU telemetry: Prometheus ``query_range`` exports of dcgm-exporter series, and nvidia-smi -q.

``OUT/telemetry/prometheus_range_<YYYY-MM-DD>.json`` is one day's
``/api/v1/query_range`` answer (``{"status": "success", "data": {"resultType": "matrix",
"result": [{"metric": {...}, "values": [[unix_s, "v"], ...]}]}}``) with dcgm-exporter's labels
(``gpu``, ``UUID``, ``pci_bus_id``, ``device``, ``modelName``, ``Hostname``). To keep volume modest
the export covers, per day, the nodes around each failure (3 days before it), around benign
precursor episodes, and a random ``telemetry_control_fraction`` of the other node-days, one sample
per ``telemetry_interval_min``. Counters move as real ones do: correctable ECC and remapped rows
step up at the row-remap / ECC events before an HBM failure, NVLink CRC errors at non-fatal NVLink
errors, PCIe replays at corrected AER errors; temperature climbs and clocks throttle before a
thermal failure. ``OUT/telemetry/nvidia-smi-q/<node>.txt`` is each node's ``nvidia-smi -q``
inventory at the end of the window.
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from faultlens.synth.cluster import Node
from faultlens.synth.failures import DAY, HOUR

if TYPE_CHECKING:
    from faultlens.synth.generate import Cluster

DRIVER = "535.161.08"
P = "DCGM_FI_DEV_"
GAUGES = (P + "GPU_TEMP", P + "POWER_USAGE", P + "SM_CLOCK", P + "CLOCK_THROTTLE_REASONS")
COUNTERS = (
    P + "ECC_SBE_VOL_TOTAL",
    P + "ECC_DBE_VOL_TOTAL",
    P + "CORRECTABLE_REMAPPED_ROWS",
    P + "ROW_REMAP_FAILURE",
    P + "NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    P + "PCIE_REPLAY_COUNTER",
)
# Counter increments (metric index in COUNTERS, low, high) per kernel event key.
_STEPS: dict[str, list[tuple[int, int, int]]] = {
    "xid92": [(0, 200, 2000)],
    "xid63": [(0, 20, 300), (2, 1, 2)],
    "xid94": [(1, 1, 2)],
    "xid94_sram": [(1, 1, 2)],
    "xid95": [(1, 1, 3)],
    "xid95_sram": [(1, 1, 3)],
    "xid48": [(1, 1, 3)],
    "xid64": [(3, 1, 2)],
    "nvlink_nonfatal": [(4, 100, 5000)],
    "nvlink_fatal": [(4, 5000, 50000)],
    "aer_corrected": [(5, 5, 200)],
}
CONTROL_FRACTION = 0.03


def _busy(cluster: Cluster) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
    horizon = cluster.config.days * DAY
    for j in cluster.jobs:
        end = j.end_s if j.end_s is not None else horizon
        for n in j.nodes:
            spans[n].append((j.start_s, end))
    out = {}
    for n, s in spans.items():
        s.sort()
        out[n] = (np.array([a for a, _ in s]), np.array([b for _, b in s]))
    return out


def _node_days(cluster: Cluster, rng: np.random.Generator) -> dict[int, set[int]]:
    """Which (day -> node indices) the export covers."""
    n_days = int(np.ceil(cluster.config.days))
    chosen: dict[int, set[int]] = defaultdict(set)
    for f in cluster.failures:
        d = int(f.ts_s // DAY)
        for k in range(max(0, d - 3), d + 1):
            chosen[k].add(f.node)
    for ev in cluster.events:
        if ev.key in _STEPS or ev.key == "thermal_only":
            chosen[int(ev.ts_s // DAY)].add(ev.node)
    draw = rng.random((n_days, len(cluster.nodes))) < CONTROL_FRACTION
    for d, i in zip(*np.nonzero(draw), strict=True):
        chosen[int(d)].add(int(i))
    return {d: chosen[d] for d in range(n_days) if chosen.get(d)}


def _series(
    cluster: Cluster,
    node: Node,
    t: np.ndarray,
    busy,
    steps,
    thermal,
    absent,
    rng: np.random.Generator,
) -> list[tuple[int, str, np.ndarray, np.ndarray]]:
    """(gpu, metric, times, values) for every GPU of ``node`` at times ``t``."""
    if busy is None:
        util = np.zeros(len(t))
    else:
        starts, ends = busy
        k = np.searchsorted(starts, t, side="right") - 1
        util = np.where((k >= 0) & (t < ends[np.maximum(k, 0)]), 1.0, 0.0)
    out = []
    for g in range(len(node.gpus)):
        keep = np.ones(len(t), bool)
        for a, b in absent.get(g, ()):
            keep &= ~((t >= a) & (t < b))
        tt, u = t[keep], util[keep]
        heat = np.zeros(len(tt))
        for ft in thermal.get(g, ()):
            ramp = np.clip((tt - (ft - 24 * HOUR)) / (24 * HOUR), 0, 1) * (tt < ft)
            heat += 28 * ramp
        temp = 34 + 36 * u + heat + rng.normal(0, 1.5, len(tt))
        throttle = np.where(temp > 87, 0x40, 0)
        clock = np.where(u > 0, 1980, 345) * np.where(throttle > 0, 0.75, 1.0)
        power = 70 + 560 * u * np.where(throttle > 0, 0.8, 1.0) + rng.normal(0, 12, len(tt))
        for name, vals in zip(
            GAUGES, (np.round(temp), np.round(power, 3), np.round(clock), throttle), strict=True
        ):
            out.append((g, name, tt, vals))
        for m, name in enumerate(COUNTERS):
            times, incs = steps.get((g, m), (np.empty(0), np.empty(0)))
            base = np.cumsum(incs)
            k = np.searchsorted(times, tt, side="right")
            vals = np.where(k > 0, base[np.maximum(k - 1, 0)] if len(base) else 0, 0)
            if m == 4:  # a little background NVLink CRC noise on every link
                vals = vals + np.floor(tt / (7 * DAY) * (node.index % 3))
            out.append((g, name, tt, vals))
    return out


def _per_node_inputs(cluster: Cluster, rng: np.random.Generator):
    steps: dict[int, dict[tuple[int, int], list[tuple[float, float]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    thermal: dict[int, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    absent: dict[int, dict[int, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    for ev in cluster.events:
        for m, lo, hi in _STEPS.get(ev.key, ()):
            g = ev.gpu if ev.gpu is not None else 0
            steps[ev.node][(g, m)].append((ev.ts_s, float(rng.integers(lo, hi + 1))))
    for f in cluster.failures:
        if f.cause.name == "GPU Thermal Interface + Sensor" and f.has_precursors:
            thermal[f.node][f.gpu or 0].append(f.ts_s)
        if f.repair_s > 0 and (f.gpu is not None or f.cause.node_down):
            gpus = [f.gpu] if f.gpu is not None and not f.cause.node_down else range(8)
            for g in gpus:
                absent[f.node][g].append((f.ts_s + 60, f.end_s))
    arr = {
        n: {
            k: (np.array([t for t, _ in v]), np.array([x for _, x in v]))
            for k, v in sorted(d.items())
        }
        for n, d in steps.items()
    }
    for d in arr.values():
        for k, (t, x) in list(d.items()):
            o = np.argsort(t, kind="stable")
            d[k] = (t[o], x[o])
    return arr, thermal, absent


def _labels(node: Node, g: int, metric: str) -> dict[str, str]:
    gpu = node.gpus[g]
    return {
        "__name__": metric,
        "gpu": str(g),
        "UUID": gpu.uuid,
        "pci_bus_id": "0000" + gpu.pci_bus_id.upper(),
        "device": f"nvidia{g}",
        "modelName": node.gpu_model,
        "Hostname": node.name,
        "DCGM_FI_DRIVER_VERSION": DRIVER,
        "instance": f"{node.name}:9400",
        "job": "dcgm-exporter",
    }


def write_telemetry(cluster: Cluster, out: Path, rng: np.random.Generator) -> list[Path]:
    cfg = cluster.config
    d = out / "telemetry"
    d.mkdir(parents=True, exist_ok=True)
    busy = _busy(cluster)
    steps, thermal, absent = _per_node_inputs(cluster, rng)
    step_s = cfg.telemetry_interval_min * 60
    epoch0 = (cfg.start - cfg.start.__class__(1970, 1, 1)).total_seconds()
    horizon = cfg.days * DAY
    paths = []
    for day, node_ids in sorted(_node_days(cluster, rng).items()):
        t = np.arange(day * DAY, min((day + 1) * DAY, horizon), step_s)
        stamp = {float(a): f'[{epoch0 + a:.0f},"' for a in t.tolist()}
        result = []
        for i in sorted(node_ids):
            node = cluster.nodes[i]
            for g, metric, tt, vals in _series(
                cluster, node, t, busy.get(node.name), steps.get(i, {}), thermal[i], absent[i], rng
            ):
                if len(tt):
                    labels = json.dumps(_labels(node, g, metric), separators=(",", ":"))
                    points = ",".join(
                        [
                            stamp[a] + v + '"]'
                            for a, v in zip(
                                tt.tolist(), map(str, vals.astype(np.int64).tolist()), strict=True
                            )
                        ]
                    )
                    result.append(f'{{"metric":{labels},"values":[{points}]}}')
        date = (cfg.start + timedelta(days=day)).date().isoformat()
        path = d / f"prometheus_range_{date}.json"
        path.write_text(_document(result))
        paths.append(path)
    paths += write_nvidia_smi(cluster, out, steps)
    return paths


def _document(result: list[str]) -> str:
    """The API answer as ``jq -c '.data.result[]'``-friendly text: one series per line.

    Still one valid JSON document; keeping each line short lets line-oriented tools (and readers
    with a line-length limit) handle a day of a whole cluster.
    """
    series = ",\n".join(result)
    return '{"status":"success","data":{"resultType":"matrix","result":[\n' + series + "\n]}}\n"


def _smi_text(cluster: Cluster, node: Node, counters: dict) -> str:
    end = cluster.config.start + timedelta(days=cluster.config.days)
    lines = [
        "",
        "==============NVSMI LOG==============",
        "",
        f"Timestamp                                 : {end:%a %b %d %H:%M:%S %Y}",
        f"Driver Version                            : {DRIVER}",
        "CUDA Version                              : 12.2",
        "",
        f"Attached GPUs                             : {len(node.gpus)}",
    ]
    for g in node.gpus:
        bus = "0000" + g.pci_bus_id.upper()

        def total(m: int, g: int = g.index) -> int:
            return int(counters.get((g, m), (None, np.zeros(0)))[1].sum())

        lines += [
            f"GPU {bus}",
            f"    Product Name                          : {node.gpu_model}",
            "    Product Brand                         : NVIDIA",
            f"    Serial Number                         : {g.serial}",
            f"    GPU UUID                              : {g.uuid}",
            f"    Minor Number                          : {g.index}",
            "    VBIOS Version                         : 96.00.74.00.0D",
            "    PCI",
            f"        Bus                               : 0x{g.pci_bus_id[5:7]}",
            "        Device                            : 0x00",
            "        Domain                            : 0x0000",
            f"        Bus Id                            : {bus}",
            "    ECC Errors",
            "        Volatile",
            f"            SRAM Correctable              : {total(0)}",
            f"            DRAM Uncorrectable            : {total(1)}",
            "    Remapped Rows",
            f"        Correctable Error                 : {total(2)}",
            f"        Uncorrectable Error               : {total(1)}",
            "        Pending                           : No",
            f"        Remapping Failure Occurred        : {'Yes' if total(3) else 'No'}",
            "    Temperature",
            "        GPU Current Temp                  : 34 C",
            "    GPU Power Readings",
            "        Power Draw                        : 71.20 W",
            "    Clocks",
            "        SM                                : 345 MHz",
        ]
    return "\n".join(lines) + "\n"


def write_nvidia_smi(cluster: Cluster, out: Path, steps: dict) -> list[Path]:
    d = out / "telemetry" / "nvidia-smi-q"
    d.mkdir(parents=True, exist_ok=True)
    paths = []
    for node in cluster.nodes:
        path = d / f"{node.name}.txt"
        path.write_text(_smi_text(cluster, node, steps.get(node.index, {})))
        paths.append(path)
    return paths

"""Stragglers in the synthetic cluster: per-GPU telemetry and training-progress logs of multi-node
jobs, some of which carry an injected straggler, with the ground truth.

For each straggler-eligible job (2+ nodes, long enough, finished) this writes

- ``OUT/jobs/<job_id>/train.log``: the job's training-progress log in one of the real formats
  (Megatron-LM, Hugging Face Trainer, PyTorch Lightning, torchtitan), rank 0 / last rank only as
  the projects print by default, with the slower steps while a straggler is active;
- ``OUT/jobs/<job_id>/telemetry.json``: the job's GPUs' DCGM fields as a Prometheus
  ``/api/v1/query_range`` response (``{"status": "success", "data": {"resultType": "matrix"}}``).

Injected causes (one slow GPU or node slows every rank: synchronous step time = max over ranks):

- ``thermal``: GPU temperature climbs for 15-40 min, then the GPU throttles (thermal throttle
  reasons, SM clock down by the slowdown factor);
- ``power``: power draw creeps up to a lowered cap, then sits at it (SW power cap, clock down);
- ``link``: a degraded NIC on one node: PCIe link errors (replay counter) grow first, then the
  node's GPUs move far fewer bytes over PCIe than their peers (node-level, ``gpu`` null);
- ``host``: CPU contention on one node: its GPUs' utilization drops, clocks stay normal
  (node-level, no precursor).

Noise: per-GPU offsets, jitter, and single-sample spikes on healthy GPUs that a detector must not
flag. Ground truth rows: ``{job_id, node, gpu, cause, slowdown, onset, end, wasted_gpu_h}``, where
``wasted_gpu_h`` is this straggler's share of its job's ``sum n_gpus * dt * (1 - 1/S(t))``.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

CAUSES = ("thermal", "power", "link", "host")
NODE_LEVEL = ("link", "host")
FORMATS = ("megatron", "hf_trainer", "lightning", "torchtitan")

DEFAULTS: dict[str, Any] = {
    "max_jobs": 12,  # straggler-eligible jobs written (the rest get no training log)
    "min_nodes": 2,
    "max_nodes": 8,
    "min_hours": 1.5,
    "straggler_job_p": 0.6,  # share of written jobs with at least one straggler
    "second_straggler_p": 0.25,
    "cause_p": (0.35, 0.25, 0.2, 0.2),  # thermal, power, link, host
    "max_samples": 360,  # telemetry samples per GPU per job (interval = max(30 s, dur / this))
    "spike_p": 0.004,  # single-sample spikes per GPU-sample on healthy GPUs
}

# DCGM throttle-reason bits.
SW_POWER_CAP = 0x4
SW_THERMAL = 0x20
HW_THERMAL = 0x40
METRICS = (
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
    "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PCIE_RX_BYTES",
    "DCGM_FI_PROF_NVLINK_TX_BYTES",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
)
BOOST_MHZ = 1980.0


def _get(obj: Any, name: str, default: Any = None) -> Any:
    return obj.get(name, default) if isinstance(obj, dict) else getattr(obj, name, default)


def _options(config: Any) -> dict[str, Any]:
    extra = _get(config, "extra", None) or {}
    return {**DEFAULTS, **(extra.get("stragglers", {}) if isinstance(extra, dict) else {})}


def eligible_jobs(jobs: list[Any], opts: dict[str, Any]) -> list[Any]:
    out = []
    for job in jobs:
        start, end = _get(job, "start"), _get(job, "end")
        nodes = _get(job, "nodes") or []
        if start is None or end is None or not opts["min_nodes"] <= len(nodes) <= opts["max_nodes"]:
            continue
        if (end - start).total_seconds() >= opts["min_hours"] * 3600:
            out.append(job)
    return out


def write(
    jobs: list[Any], nodes: list[Any], rng: np.random.Generator, out_dir: str | Path, config: Any
) -> list[dict[str, Any]]:
    """Write training logs and per-GPU telemetry of eligible jobs; return straggler ground truth."""
    opts = _options(config)
    chosen = eligible_jobs(jobs, opts)
    if len(chosen) > opts["max_jobs"]:
        idx = np.sort(rng.choice(len(chosen), size=opts["max_jobs"], replace=False))
        chosen = [chosen[i] for i in idx]
    by_name = {_get(n, "name"): n for n in nodes}
    truth: list[dict[str, Any]] = []
    for job in chosen:
        truth.extend(write_job(job, by_name, rng, Path(out_dir), opts))
    return truth


def _draw_stragglers(
    job: Any, rng: np.random.Generator, opts: dict[str, Any], n_samples: int, gpus_per_node: int
) -> list[dict[str, Any]]:
    if rng.random() >= opts["straggler_job_p"]:
        return []
    n = 2 if rng.random() < opts["second_straggler_p"] else 1
    out: list[dict[str, Any]] = []
    used: set[tuple[str, int | None]] = set()
    nodes = list(_get(job, "nodes"))
    for _ in range(n):
        cause = str(rng.choice(CAUSES, p=np.asarray(opts["cause_p"]) / sum(opts["cause_p"])))
        if cause in NODE_LEVEL and len(nodes) < 3:  # peers cannot tell which of 2 nodes is slow
            cause = "thermal" if cause == "link" else "power"
        node = str(rng.choice(nodes))
        gpu = None if cause in NODE_LEVEL else int(rng.integers(gpus_per_node))
        if (node, gpu) in used or (node, None) in used:
            continue
        used.add((node, gpu))
        lo, hi = {
            "thermal": (1.15, 1.6),
            "power": (1.12, 1.45),
            "link": (1.2, 1.8),
            "host": (1.12, 1.4),
        }[cause]
        onset = int(n_samples * rng.uniform(0.25, 0.6))
        end = n_samples
        if rng.random() >= 0.75:  # some recover before the job ends
            end = int(rng.uniform(onset + 0.4 * (n_samples - onset), n_samples))
        out.append(
            {
                "cause": cause,
                "node": node,
                "gpu": gpu,
                "slowdown": float(rng.uniform(lo, hi)),
                "onset_i": onset,
                "end_i": min(max(end, onset + 8), n_samples),
                "lead_i": int(rng.uniform(15, 40) * 60),
            }
        )  # precursor lead, seconds for now
    return out


def write_job(
    job: Any, nodes: dict[str, Any], rng: np.random.Generator, out: Path, opts: dict[str, Any]
) -> list[dict[str, Any]]:
    """One job's telemetry and training log; returns its ground-truth rows."""
    job_id = str(_get(job, "job_id"))
    start, end = _get(job, "start"), _get(job, "end")
    node_names = list(_get(job, "nodes"))
    gpn = max(1, int(_get(job, "n_gpus") or 8) // len(node_names))
    dur_s = (end - start).total_seconds()
    dt = float(max(30, int(np.ceil(dur_s / opts["max_samples"] / 10.0)) * 10))
    n_t = int(dur_s // dt)
    stragglers = _draw_stragglers(job, rng, opts, n_t, gpn)
    for s in stragglers:
        s["lead_i"] = max(2, int(s["lead_i"] / dt))
    ts = [start + timedelta(seconds=i * dt) for i in range(n_t)]
    factor = np.ones(n_t)  # job slowdown S(t): the slowest straggler active at t
    for s in stragglers:
        factor[s["onset_i"] : s["end_i"]] = np.maximum(
            factor[s["onset_i"] : s["end_i"]], s["slowdown"]
        )
    series = _telemetry(node_names, gpn, stragglers, factor, rng, opts)
    job_dir = out / "jobs" / job_id
    job_dir.mkdir(parents=True, exist_ok=True)
    _write_prometheus(job_dir / "telemetry.json", ts, node_names, gpn, nodes, series)
    fmt = FORMATS[int(rng.integers(len(FORMATS)))]
    _write_train_log(job_dir / "train.log", fmt, ts, dt, factor, rng, len(node_names) * gpn)
    n_gpus = len(node_names) * gpn
    waste = n_gpus * dt / 3600.0 * (1.0 - 1.0 / factor)
    truth = []
    for s in stragglers:
        sl = slice(s["onset_i"], s["end_i"])
        active = np.zeros(n_t)
        for o in stragglers:
            active[o["onset_i"] : o["end_i"]] += 1
        share = float(np.sum(waste[sl] / np.maximum(active[sl], 1)))
        truth.append(
            {
                "job_id": job_id,
                "node": s["node"],
                "gpu": s["gpu"],
                "cause": s["cause"],
                "slowdown": round(s["slowdown"], 4),
                "onset": ts[s["onset_i"]].isoformat(),
                "end": (start + timedelta(seconds=min(s["end_i"], n_t) * dt)).isoformat(),
                "wasted_gpu_h": round(share, 4),
            }
        )
    return truth


def _telemetry(
    node_names: list[str],
    gpn: int,
    stragglers: list[dict[str, Any]],
    factor: np.ndarray,
    rng: np.random.Generator,
    opts: dict[str, Any],
) -> dict[str, np.ndarray]:
    """Arrays [time, gpu] per metric, GPUs ordered node by node."""
    n_t, n_g = len(factor), len(node_names) * gpn
    shape = (n_t, n_g)
    temp_off = rng.normal(0, 3.0, n_g)
    power_off = rng.normal(0, 20.0, n_g)
    clock = BOOST_MHZ + rng.normal(0, 8.0, shape)
    power = 610 + power_off + rng.normal(0, 15.0, shape)
    temp = 64 + temp_off + rng.normal(0, 1.2, shape)
    util = np.clip(98 + rng.normal(0, 1.0, shape), 0, 100)
    throttle = np.zeros(shape)
    pcie = 14e9 / factor[:, None] * (1 + rng.normal(0, 0.05, shape))
    nvlink = 90e9 / factor[:, None] * (1 + rng.normal(0, 0.05, shape))
    replay_inc = (rng.random(shape) < 0.002).astype(float)
    for s in stragglers:
        on, off, lead, sd = s["onset_i"], s["end_i"], s["lead_i"], s["slowdown"]
        base = node_names.index(s["node"]) * gpn
        cols = [base + s["gpu"]] if s["gpu"] is not None else list(range(base, base + gpn))
        pre = slice(max(0, on - lead), on)
        ramp = np.linspace(0, 1, on - max(0, on - lead))[:, None]
        act = slice(on, off)
        n_act = off - on
        for c in cols:
            if s["cause"] == "thermal":
                temp[pre, c] += ramp[:, 0] * (84 - temp[pre, c].mean())
                temp[act, c] = rng.normal(89, 1.0, n_act)
                clock[act, c] = BOOST_MHZ / sd + rng.normal(0, 10, n_act)
                power[act, c] -= 60
                throttle[act, c] = SW_THERMAL | HW_THERMAL
            elif s["cause"] == "power":
                cap = 560.0 - 60 * (sd - 1)
                power[pre, c] += ramp[:, 0] * 80
                power[act, c] = cap + rng.normal(0, 2.0, n_act)
                clock[act, c] = BOOST_MHZ / sd + rng.normal(0, 10, n_act)
                throttle[act, c] = SW_POWER_CAP
            elif s["cause"] == "link":
                replay_inc[pre, c] += rng.poisson(1 + 6 * ramp[:, 0])
                replay_inc[act, c] += rng.poisson(8, n_act)
                pcie[act, c] *= rng.uniform(0.4, 0.55)
            else:  # host
                util[act, c] = np.clip(98 / sd + rng.normal(0, 2.0, n_act), 0, 100)
    _spikes(rng, opts["spike_p"], clock, temp, util, throttle, pcie)
    return {
        "DCGM_FI_DEV_SM_CLOCK": np.round(clock),
        "DCGM_FI_DEV_POWER_USAGE": np.round(power, 3),
        "DCGM_FI_DEV_GPU_TEMP": np.round(temp),
        "DCGM_FI_DEV_GPU_UTIL": np.round(util),
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": throttle,
        "DCGM_FI_PROF_PCIE_TX_BYTES": np.round(pcie),
        "DCGM_FI_PROF_PCIE_RX_BYTES": np.round(pcie * 0.97),
        "DCGM_FI_PROF_NVLINK_TX_BYTES": np.round(nvlink),
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": np.cumsum(replay_inc, axis=0),
    }


def _spikes(
    rng: np.random.Generator,
    p: float,
    clock: np.ndarray,
    temp: np.ndarray,
    util: np.ndarray,
    throttle: np.ndarray,
    pcie: np.ndarray,
) -> None:
    """One-sample excursions on any GPU: a detector with persistence must ignore them."""
    hit = rng.random(clock.shape) < p
    kind = rng.integers(0, 4, clock.shape)
    clock[hit & (kind == 0)] = 1410.0
    throttle[hit & (kind == 0)] = SW_POWER_CAP
    temp[hit & (kind == 1)] += 18
    util[hit & (kind == 2)] = 35
    pcie[hit & (kind == 3)] *= 0.3


def _write_prometheus(
    path: Path,
    ts: list[datetime],
    node_names: list[str],
    gpn: int,
    nodes: dict[str, Any],
    series: dict[str, np.ndarray],
) -> None:
    epoch = datetime(1970, 1, 1)
    stamps = np.char.mod("%.10g", np.array([(t - epoch).total_seconds() for t in ts]))
    lines = []
    for metric, arr in series.items():
        text = np.char.mod("%.10g", arr)
        for ni, name in enumerate(node_names):
            gpus = _get(nodes.get(name), "gpus", None) or []
            model = _get(nodes.get(name), "gpu_model", "NVIDIA H100 80GB HBM3")
            for g in range(gpn):
                gpu = gpus[g] if g < len(gpus) else None
                pci = _get(gpu, "pci_bus_id", f"0000:{g:02x}:00.0")
                labels = {
                    "__name__": metric,
                    "gpu": str(g),
                    "UUID": _get(gpu, "uuid", f"GPU-{ni:08x}-0000-0000-0000-{g:012x}"),
                    "pci_bus_id": "0000" + pci.upper(),
                    "device": f"nvidia{g}",
                    "modelName": model,
                    "Hostname": name,
                    "DCGM_FI_DRIVER_VERSION": "550.90.07",
                    "instance": f"{name}:9400",
                    "job": "dcgm-exporter",
                }
                col = text[:, ni * gpn + g]
                values = ",".join(f'[{a},"{b}"]' for a, b in zip(stamps, col, strict=True))
                lines.append(
                    f'{{"metric":{json.dumps(labels, separators=(",", ":"))},"values":[{values}]}}'
                )
    # The query_range response, one series per line (as ``jq -c '.data.result[]'`` would split
    # it), so that no line of a large export passes the reader's line-length limit.
    path.write_text(
        '{"status":"success","data":{"resultType":"matrix","result":[\n'
        + ",\n".join(lines)
        + "\n]}}\n"
    )


# -- training-progress logs ------------------------------------------------------------------------


def _step_times(
    ts: list[datetime],
    dt: float,
    factor: np.ndarray,
    rng: np.random.Generator,
    base_s: float,
    t0_s: float,
) -> np.ndarray:
    """Seconds since ``ts[0]`` at which each step ends, from ``t0_s`` to the end of the job."""
    horizon = len(ts) * dt
    n_max = int((horizon - t0_s) / base_s) + 2
    jitter = 1 + rng.normal(0, 0.015, n_max)
    jitter[rng.random(n_max) < 0.002] *= 1.8  # a slow step now and then (data loader, GC)
    out = np.empty(n_max)
    t = t0_s
    n = 0
    for k in range(n_max):
        i = min(int(t // dt), len(factor) - 1)
        t += base_s * factor[i] * jitter[k]
        if t >= horizon:
            break
        out[k] = t
        n = k + 1
    return out[:n]


def _write_train_log(
    path: Path,
    fmt: str,
    ts: list[datetime],
    dt: float,
    factor: np.ndarray,
    rng: np.random.Generator,
    n_gpus: int,
) -> None:
    base_s = float(rng.uniform(0.8, 3.0))
    t0_s = float(rng.uniform(40, 120))  # start-up before the first step
    ends = _step_times(ts, dt, factor, rng, base_s, t0_s)
    start = ts[0]
    writer = {
        "megatron": _megatron,
        "torchtitan": _titan,
        "hf_trainer": _hf,
        "lightning": _lightning,
    }[fmt]
    with path.open("w", encoding="utf-8", newline="") as f:
        writer(f, start, t0_s, ends, rng, n_gpus)


def _clock(start: datetime, s: float) -> datetime:
    return start + timedelta(seconds=float(s))


def _megatron(
    f: Any, start: datetime, t0_s: float, ends: np.ndarray, rng: np.random.Generator, n_gpus: int
) -> None:
    total = int(len(ends) * 1.3)
    gbs = 8 * n_gpus
    f.write(
        f"using world size: {n_gpus}, data-parallel size: {n_gpus // 8}, "
        "context-parallel size: 1, tensor-model-parallel size: 8, "
        "pipeline-model-parallel size: 1\n"
    )
    t = _clock(start, t0_s - 5)
    f.write(f"[after dataloaders are built] datetime: {t:%Y-%m-%d %H:%M:%S} \n")
    f.write("training ...\n")
    prev = t0_s
    for it in range(10, len(ends) + 1, 10):
        now = ends[it - 1]
        ms = (now - prev) / 10 * 1000
        prev = now
        loss = 10.5 * np.exp(-it / (total / 3)) + 1.8 + rng.normal(0, 0.02)
        f.write(
            f" [{_clock(start, now):%Y-%m-%d %H:%M:%S}] iteration {it:8d}/{total:8d} |"
            f" consumed samples: {it * gbs:12d} | elapsed time per iteration (ms): {ms:.1f} |"
            f" throughput per GPU (TFLOP/s/GPU): {380000 / ms:.1f} |"
            f" learning rate: {3e-4 * min(1, it / 2000):.6E} | global batch size: {gbs:5d} |"
            f" lm loss: {loss:.6E} | loss scale: 1.0 | grad norm: {abs(rng.normal(1, 0.2)):.3f} |"
            f" number of skipped iterations: {0:3d} | number of nan iterations: {0:3d} |\n"
        )


def _titan(
    f: Any, start: datetime, t0_s: float, ends: np.ndarray, rng: np.random.Generator, n_gpus: int
) -> None:
    def stamp(s: float) -> str:
        t = _clock(start, s)
        return f"[rank0]:[titan] {t:%Y-%m-%d %H:%M:%S},{t.microsecond // 1000:03d} - root - INFO - "

    f.write(stamp(t0_s - 30) + "Starting job: Llama 3 8B training\n")
    f.write(stamp(t0_s - 1) + "Training starts at step 1\n")
    prev_t, prev_step = t0_s, 0
    for step in [1, *range(10, len(ends) + 1, 10)]:
        now = ends[step - 1]
        st = (now - prev_t) / (step - prev_step)
        prev_t, prev_step = now, step
        tps = 8192 * 2 / st
        loss = 10.5 * np.exp(-step / 3000) + 2.0 + rng.normal(0, 0.02)
        f.write(
            stamp(now) + f"step: {step:2}  loss: {loss:7.4f}  grad_norm: "
            f"{abs(rng.normal(1, 0.2)):7.4f}  memory: 63.36GiB(80.01%)  tps: {round(tps):,}  "
            f"tflops: {tps * 4.9e-8 * 1e3:,.2f}  mfu: {tps * 4.9e-8 * 1e3 / 9.89:.2f}%\n"
        )


def _tqdm(
    n: int,
    total: int,
    elapsed: float,
    rate: float | None,
    prefix: str = "",
    postfix: str = "",
    invert: bool = True,
) -> str:
    def hms(s: float) -> str:
        s = int(s)
        return (
            f"{s // 3600:d}:{s % 3600 // 60:02d}:{s % 60:02d}"
            if s >= 3600
            else f"{s // 60:02d}:{s % 60:02d}"
        )

    frac = n / total
    full = int(frac * 10)
    bar = ("█" * full + ("▌" if frac * 10 - full >= 0.5 and full < 10 else "")).ljust(10)
    head = f"{prefix}{frac * 100:3.0f}%|{bar}| {n}/{total} [{hms(elapsed)}<"
    if rate is None:
        return head + f"?, ?it/s{postfix}]"
    remaining = hms((total - n) / rate)
    if invert:
        rate_s = f"{rate:5.2f}it/s" if rate >= 1 else f"{1 / rate:5.2f}s/it"
        return head + f"{remaining}, {rate_s}{postfix}]"
    return head + f"{remaining}, {rate:.2f}it/s{postfix}]"


def _hf(
    f: Any, start: datetime, t0_s: float, ends: np.ndarray, rng: np.random.Generator, n_gpus: int
) -> None:
    total = int(len(ends) * 1.3)
    t_bar = t0_s - 1

    def log(s: float, line_no: int, msg: str) -> None:
        t = _clock(start, s)
        f.write(
            f"[INFO|trainer.py:{line_no}] {t:%Y-%m-%d %H:%M:%S},{t.microsecond // 1000:03d}"
            f" >> {msg}\n"
        )

    log(t_bar, 2314, "***** Running training *****")
    log(t_bar, 2320, f"  Total optimization steps = {total:,}")
    f.write("\r" + _tqdm(0, total, 0, None))
    rate = None
    prev = t0_s
    for n in range(1, len(ends) + 1):
        inst = 1.0 / max(ends[n - 1] - prev, 1e-3)
        prev = ends[n - 1]
        rate = inst if rate is None else 0.3 * inst + 0.7 * rate
        bar = _tqdm(n, total, ends[n - 1] - t_bar, rate)
        f.write("\r" + bar)
        if n % 50 == 0:
            loss = 2.5 * np.exp(-n / 5000) + 0.9 + rng.normal(0, 0.02)
            f.write(
                "\r" + " " * len(bar) + "\r" + f"{{'loss': {loss:.4f}, 'grad_norm': "
                f"{abs(rng.normal(1, 0.2)):.4f}, 'learning_rate': {5e-5 * (1 - n / total):.4e},"
                f" 'epoch': {n / total:.2f}}}\n" + "\r" + bar
            )
    f.write("\n")


def _lightning(
    f: Any, start: datetime, t0_s: float, ends: np.ndarray, rng: np.random.Generator, n_gpus: int
) -> None:
    t = _clock(start, t0_s - 1)
    f.write(
        f"[{t:%Y-%m-%d %H:%M:%S},{t.microsecond // 1000:03d}][__main__][INFO] - "
        "Starting training!\n"
    )
    f.write("GPU available: True (cuda), used: True\n")
    f.write("LOCAL_RANK: 0 - CUDA_VISIBLE_DEVICES: [0,1,2,3,4,5,6,7]\n")
    per_epoch = 500
    epoch_start = t0_s - 1
    rate = None
    prev = t0_s
    for n in range(1, len(ends) + 1):
        epoch, k = divmod(n - 1, per_epoch)
        if k == 0:
            if epoch:
                f.write("\n")
                epoch_start = ends[n - 2]
            f.write("\r" + _tqdm(0, per_epoch, 0, None, prefix=f"Epoch {epoch}: "))
        inst = 1.0 / max(ends[n - 1] - prev, 1e-3)
        prev = ends[n - 1]
        rate = inst if rate is None else 0.3 * inst + 0.7 * rate
        loss = 2.5 * np.exp(-n / 5000) + 0.9 + rng.normal(0, 0.02)
        f.write(
            "\r"
            + _tqdm(
                k + 1,
                per_epoch,
                ends[n - 1] - epoch_start,
                rate,
                prefix=f"Epoch {epoch}: ",
                postfix=f", v_num=0, train_loss={loss:.3f}",
                invert=False,
            )
        )
    f.write("\n")


def standalone_jobs(
    rng: np.random.Generator,
    n_jobs: int,
    start: datetime,
    n_nodes: int = 32,
    gpus_per_node: int = 8,
) -> list[dict[str, Any]]:
    """Multi-node jobs on a small cluster, for running this generator on its own (tests, demo).

    Jobs are dicts with the fields of ``synth.cluster.Job`` that ``write`` reads."""
    jobs = []
    free = np.zeros(n_nodes)  # hours after ``start`` each node is free
    for i in range(n_jobs):
        k = int(rng.choice([2, 3, 4, 6, 8], p=[0.25, 0.25, 0.25, 0.15, 0.1]))
        chosen = np.argsort(free, kind="stable")[:k]
        t0 = float(free[chosen].max()) + float(rng.uniform(0.05, 0.5))
        dur = float(rng.uniform(2.0, 6.0))
        free[chosen] = t0 + dur
        jobs.append(
            {
                "job_id": str(4000 + i),
                "nodes": [f"gpu{int(n) + 1:04d}" for n in sorted(chosen)],
                "n_gpus": k * gpus_per_node,
                "start": start + timedelta(hours=t0),
                "end": start + timedelta(hours=t0 + dur),
            }
        )
    return jobs

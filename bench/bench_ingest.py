"""Kernel-log ingest speed: grep vs a plain Python loop vs faultlens, on a generated syslog.

    python -m bench.bench_ingest --size-gb 1

Generates a kernel syslog of the given size in a temp folder (about 95% ordinary noise, Xid and
other GPU/RAS lines mixed in, a few invalid UTF-8 bytes and tqdm ``\\r`` lines), then times, each in
its own process: (a) ``LC_ALL=C grep -c 'NVRM: Xid'``; (b) a plain Python loop (text mode,
``newline='\\n'``, literal pre-filter, ``re`` on candidate lines); (c) ``faultlens`` ingest of the
file into a fresh DuckDB through ``ingest.pipeline.ingest_paths`` (parse, normalize, write).
The three run ``--repeat`` times, interleaved (the machine is shared: a load spike then hits all
three alike); the fastest wall time of each counts, and the CPU seconds (user + system, from
``wait4``) are reported too, being much less sensitive to other load than wall time.
Prints a markdown table and writes it with the raw numbers to ``bench/out/``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.bench_ingest_nccl import bytecode_env

OUT = Path(__file__).resolve().parent / "out"
REPO = Path(__file__).resolve().parents[1]

NOISE = [
    "sshd[{pid}]: Accepted publickey for root from 10.1.{a}.{b} port {port} ssh2: RSA SHA256:x",
    "sshd[{pid}]: pam_unix(sshd:session): session opened for user root(uid=0) by (uid=0)",
    "systemd[1]: Started Session {pid} of User root.",
    "systemd-logind[{a}]: New session {pid} of user slurm.",
    "CRON[{pid}]: (root) CMD (/usr/lib/sa/sa1 1 1)",
    "kernel: [{up}] IPv6: ADDRCONF(NETDEV_CHANGE): cali{port}: link becomes ready",
    "kernel: [{up}] perf: interrupt took too long ({a} > {b}), lowering kernel.perf_event_max",
    "kernel: [{up}] EXT4-fs (md127p3): re-mounted. Quota mode: none.",
    "kernel: [{up}] nvidia-nvswitch{a}: open (major=510)",
    'kernel: [{up}] audit: type=1400 audit({pid}.{port}:{a}): apparmor="DENIED" operation="open"',
    "slurmd[{pid}]: launch task StepId={port}.0 request from UID:1000 GID:1000 HOST:10.0.{a}.{b}",
    'dockerd[{pid}]: time="2025-02-14T05:03:41Z" level=info msg="ignoring event" '
    "module=libcontainerd",
    'containerd[{pid}]: level=info msg="shim disconnected" id={port}{a}{b}',
    "nvidia-persistenced[{pid}]: device 0000:{a:02x}:00.0 - persistence mode enabled.",
    "rsyslogd[{pid}]: imjournal: {port} messages lost due to rate-limiting",
    "python3[{pid}]: Epoch 3:  {a}%|#####     | {port}/50000 [12:01<10:00,  1.37it/s]\rEpoch 3",
]
MEANINGFUL = [
    (
        30,
        "kernel: [{up}] NVRM: Xid (PCI:0000:{a:02x}:00): {xid}, pid={pid}, name=python3, "
        "Ch 0000000{b}, errorString CTX SWITCH TIMEOUT, Info 0x{port:x}",
    ),
    (
        4,
        "kernel: [{up}] NVRM: Xid (PCI:0000:{a:02x}:00): 13, pid='<unknown>', name=<unknown>, "
        "Graphics SM Warp Exception on (GPC {b}, TPC 1, SM 0): Out Of Range Address",
    ),
    (
        2,
        "kernel: [{up}] NVRM: Xid (PCI:0000:{a:02x}:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link {b} "
        "(0x026001c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
    ),
    (
        2,
        "kernel: [{up}] NVRM: GPU at PCI:0000:{a:02x}:00: GPU-8a47641b-dff6-f09f-618c-c3eb58fb430d",
    ),
    (
        3,
        "kernel: [{up}] NVRM:     -{b}    76   GSP_RM_CONTROL        0x0000000020802a02 "
        "0x0000000000000008 0x00062ed1a6b480ff 0x00062ed1a6b48273    372us",
    ),
    (2, "kernel: [{up}] mlx5_core 0000:{a:02x}:00.0 mlx5_{b}: Port: 1 Link DOWN"),
    (2, "kernel: [{up}] mlx5_core 0000:{a:02x}:00.0: E-Switch: Total vports 2, per vport: max uc"),
    (1, "kernel: [{up}] pcieport 0000:00:01.0: AER: Corrected error received: 0000:{a:02x}:00.0"),
    (
        1,
        "kernel: [{up}] EDAC MC{b}: 1 CE memory read error on CPU_SrcID#0_MC#0_Chan#{b}_DIMM#0 "
        "(channel:{b} slot:0 page:0x{port:x} offset:0x0 grain:32 syndrome:0x0)",
    ),
    (1, "kernel: [{up}] INFO: task python3:{pid} blocked for more than 120 seconds."),
    (1, "systemd-networkd[{a}]: ib{b}: lost carrier"),
    (
        1,
        "kernel: [{up}] nvidia-nvswitch{b}: SXid (PCI:0000:{a:02x}:00.0): 12028, Non-fatal, "
        "Link 32 egress non-posted PRIV error (First)",
    ),
]
MEANINGFUL_SHARE = 0.05
MONTHS = ("Jan", "Feb", "Mar")
LITERALS = (
    "NVRM",
    "Xid",
    "PCIe Bus Error",
    "[Hardware Error]",
    "NV_ERR_",
    "EDAC",
    "AER:",
    "mlx5",
    "carrier",
    "blocked for more than",
)


def _render(rng: random.Random, template: str, n: int) -> str:
    up = f"{rng.uniform(1, 900000):12.6f}"
    stamp = (
        f"{rng.choice(MONTHS)} {rng.randint(1, 28):2d} {rng.randint(0, 23):02d}:"
        f"{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
    )
    body = template.format(
        pid=rng.randint(100, 4_000_000),
        a=rng.randint(1, 250),
        b=rng.randint(0, 9),
        port=rng.randint(1024, 65535),
        up=up,
        xid=rng.choice((13, 31, 43, 45, 48, 63, 74, 79, 94, 109, 119)),
    )
    return f"{stamp} gpu-{n % 64:03d} {body}"


def generate(path: Path, size_bytes: int, seed: int = 7) -> dict[str, int]:
    """Write the synthetic syslog; returns counts of lines written by category."""
    rng = random.Random(seed)
    weights = [w for w, _ in MEANINGFUL]
    noise_pool = [_render(rng, rng.choice(NOISE), i) for i in range(40_000)]
    hit_pool = [
        _render(rng, rng.choices([t for _, t in MEANINGFUL], weights)[0], i) for i in range(8_000)
    ]
    written = lines = 0
    with path.open("wb") as f:
        while written < size_bytes:
            batch = [
                rng.choice(hit_pool) if rng.random() < MEANINGFUL_SHARE else rng.choice(noise_pool)
                for _ in range(50_000)
            ]
            data = ("\n".join(batch) + "\n").encode()
            if rng.random() < 0.05:  # a stray invalid byte now and then
                cut = data.find(b"\n", len(data) // 2) + 1
                bad = b"Feb  1 00:00:00 gpu-001 kernel: bad \xff\xfe byte\n"
                data = data[:cut] + bad + data[cut:]
            f.write(data)
            written += len(data)
            lines += data.count(b"\n")
    return {"bytes": written, "lines": lines}


def _count_lines(path: Path) -> int:
    n = 0
    with path.open("rb") as f:
        while block := f.read(1 << 24):
            n += block.count(b"\n")
    return n


PY_LOOP = r"""
import re, sys
lits = %r
xid = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f:.]+)\): ([0-9]+),"
                 r"(?: pid=([^,]*), name=([^,]*),)? ?(.*)$")
stamp = re.compile(r"^([A-Z][a-z]{2}) +([0-9]{1,2}) ([0-9:]{8}) ([^ ]+) ([^ :\[]+)"
                   r"(?:\[[0-9]+\])?: (?:\[ *([0-9.]+)\] )?(.*)$")
rows = []; n = 0
with open(sys.argv[1], encoding="utf-8", errors="replace", newline="\n") as f:
    for line in f:
        n += 1
        if any(l in line for l in lits):
            m = stamp.match(line)
            body = m.group(7) if m else line
            x = xid.search(body)
            rows.append((n, m.groups()[:6] if m else None, x.groups() if x else body))
print(n, len(rows))
"""


def _timed(
    cmd: list[str], env: dict[str, str] | None = None, ok: tuple[int, ...] = (0,)
) -> dict[str, object]:
    """Run ``cmd``: wall seconds, CPU seconds (user + system) and peak RSS (MiB) of that process
    alone (``wait4``, not RUSAGE_CHILDREN, which is the maximum over every child so far), stdout."""
    with tempfile.TemporaryFile() as errf:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errf, env=env, cwd=REPO)
        assert proc.stdout is not None
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        errf.seek(0)
        err = errf.read()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in ok:
        raise RuntimeError(f"{cmd[0]} failed ({proc.returncode}): {err.decode()[-2000:]}")
    return {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "rss_mib": usage.ru_maxrss / 1024,
        "stdout": out.decode().strip(),
    }


def _best(runs: list[dict[str, object]]) -> dict[str, object]:
    """The run with the least wall time, with the CPU seconds of every run."""
    best = dict(min(runs, key=lambda r: r["wall_s"]))  # type: ignore[arg-type, return-value]
    best["walls_s"] = [round(float(r["wall_s"]), 3) for r in runs]  # type: ignore[arg-type]
    best["cpus_s"] = [round(float(r["cpu_s"]), 3) for r in runs]  # type: ignore[arg-type]
    return best


def run_faultlens(path: str, db: str) -> None:
    """Entry point of the child process: ingest one file, print the report as JSON."""
    from datetime import datetime

    from faultlens.ingest.pipeline import ingest_paths
    from faultlens.ingest.store import Store

    with Store(db) as store:
        report = ingest_paths(store, [path], now=datetime(2025, 3, 1))
        events = store.count("events")
    f = report.files[0]
    print(
        json.dumps(
            {
                "status": f.status,
                "lines": f.lines,
                "parsed": f.parsed,
                "noise": f.noise,
                "quarantined": f.quarantined,
                "events": events,
                "error": f.error,
            }
        )
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-gb", type=float, default=1.0)
    ap.add_argument("--keep", action="store_true", help="keep the generated file")
    ap.add_argument("--file", help="time this (previously generated) file instead")
    ap.add_argument(
        "--repeat",
        type=int,
        default=2,
        help="runs of each approach (interleaved); the fastest run counts",
    )
    ap.add_argument("--run-faultlens", nargs=2, metavar=("PATH", "DB"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.run_faultlens:
        run_faultlens(*args.run_faultlens)
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="faultlens-bench-"))
    try:
        log = tmp / "kern.log"
        t0 = time.perf_counter()
        if args.file:
            log = Path(args.file)
            counts = {"bytes": log.stat().st_size, "lines": _count_lines(log)}
        else:
            counts = generate(log, int(args.size_gb * 1024**3))
        gen_s = time.perf_counter() - t0
        size_mb = counts["bytes"] / 1e6
        env_c = {**os.environ, "LC_ALL": "C"}
        py_env = bytecode_env()
        subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL, check=True)  # warm cache
        fl_cmd = [
            sys.executable,
            "-m",
            "bench.bench_ingest",
            "--run-faultlens",
            str(log),
            str(tmp / "bench.duckdb"),
        ]
        runs: dict[str, list[dict[str, object]]] = {"grep": [], "loop": [], "fl": []}
        for _ in range(args.repeat):  # interleaved, so that a load spike hits all three alike
            runs["grep"].append(_timed(["grep", "-c", "NVRM: Xid", str(log)], env_c, ok=(0, 1)))
            loop_cmd = [sys.executable, "-c", PY_LOOP % (LITERALS,), str(log)]
            runs["loop"].append(_timed(loop_cmd, py_env))
            for p in tmp.glob("bench.duckdb*"):
                p.unlink()
            runs["fl"].append(_timed(fl_cmd, py_env))
        grep, loop, fl = (_best(runs[k]) for k in ("grep", "loop", "fl"))
        rss = max(float(r["rss_mib"]) for r in runs["fl"])  # type: ignore[arg-type]
        report = json.loads(fl["stdout"].splitlines()[-1])
        results = {
            "size_mb": size_mb,
            "lines": counts["lines"],
            "generate_s": gen_s,
            "repeat": args.repeat,
            "grep": {**_stats(grep, size_mb), "xid_lines": int(grep["stdout"])},
            "python_loop": {**_stats(loop, size_mb), "out": loop["stdout"]},
            "faultlens": {**_stats(fl, size_mb), "peak_rss_mib": rss, **report},
        }
        results["ratio_faultlens_grep"] = results["faultlens"]["mb_s"] / results["grep"]["mb_s"]
        results["ratio_faultlens_python"] = (
            results["faultlens"]["mb_s"] / results["python_loop"]["mb_s"]
        )
        results["cpu_ratio_faultlens_python"] = (
            results["python_loop"]["cpu_s"] / results["faultlens"]["cpu_s"]
        )
        table = render(results)
        print(table)
        OUT.mkdir(exist_ok=True)
        (OUT / "bench_ingest.json").write_text(json.dumps(results, indent=2))
        (OUT / "bench_ingest.md").write_text(table + "\n")
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


def _stats(run: dict[str, object], size_mb: float) -> dict[str, object]:
    wall = float(run["wall_s"])  # type: ignore[arg-type]
    return {
        "wall_s": wall,
        "mb_s": size_mb / wall,
        "cpu_s": run["cpu_s"],
        "walls_s": run["walls_s"],
        "cpus_s": run["cpus_s"],
    }


def render(r: dict) -> str:
    fl = r["faultlens"]
    rows = [
        "| approach | wall s (best) | MB/s | CPU s | peak RSS MiB |",
        "|---|---:|---:|---:|---:|",
        f"| `LC_ALL=C grep -c 'NVRM: Xid'` | {r['grep']['wall_s']:.2f} | "
        f"{r['grep']['mb_s']:.0f} | {r['grep']['cpu_s']:.2f} | |",
        f"| Python loop + `re` (pre-filter) | {r['python_loop']['wall_s']:.2f} | "
        f"{r['python_loop']['mb_s']:.0f} | {r['python_loop']['cpu_s']:.2f} | |",
        f"| faultlens ingest -> DuckDB | {fl['wall_s']:.2f} | {fl['mb_s']:.0f} | "
        f"{fl['cpu_s']:.2f} | {fl['peak_rss_mib']:.0f} |",
    ]
    return "\n".join(
        [
            f"File: {r['size_mb']:.0f} MB, {r['lines']:,} lines; faultlens: {fl['parsed']:,} parsed, "
            f"{fl['noise']:,} noise, {fl['quarantined']:,} quarantined, {fl['events']:,} events "
            f"(status {fl['status']}).",
            "",
            *rows,
            "",
            f"faultlens / grep = {r['ratio_faultlens_grep']:.2f} (target >= 0.25); "
            f"faultlens / python = {r['ratio_faultlens_python']:.2f} (target >= 2); "
            f"peak RSS {fl['peak_rss_mib']:.0f} MiB (target <= 1024). "
            f"CPU seconds, Python loop / faultlens = {r['cpu_ratio_faultlens_python']:.2f}. "
            f"Best of {r['repeat']} interleaved runs; walls faultlens {fl['walls_s']}, "
            f"loop {r['python_loop']['walls_s']}, grep {r['grep']['walls_s']}.",
        ]
    )


if __name__ == "__main__":
    sys.exit(main())

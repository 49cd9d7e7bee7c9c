"""Scale-out ingest: the plain local path vs a Dask LocalCluster with 1 and 2 workers.

    python -m bench.bench_scale --size-gb 10 [--files 40] [--keep DIR]

Generates a tree of per-node kernel syslogs (``gpu-NNN/kern.log``, about 95% noise, Xid and other
GPU/RAS lines mixed in) plus a ``sacct --parsable2`` file and a slurmctld log, totalling
``--size-gb``; then ingests the whole tree into a fresh DuckDB three times, each in its own
process: (a) ``ingest_paths`` in one process (``workers=1``); (b) on a Dask ``LocalCluster`` of one
worker process; (c) of two. Prints a markdown table (GB, seconds, MB/s, speedup over the plain path)
and writes it with the raw numbers to ``bench/out/``.

The writers (``write_kernel_log``, ``write_sacct``, ``write_slurmctld``, ``make_tree``) are also
used by the tests to make inputs of any size quickly.
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
from datetime import datetime, timedelta
from functools import lru_cache
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"
REPO = Path(__file__).resolve().parents[1]

_NOISE = [
    "sshd[{pid}]: Accepted publickey for root from 10.1.{a}.{b} port {port} ssh2: RSA SHA256:x",
    "systemd[1]: Started Session {pid} of User root.",
    "CRON[{pid}]: (root) CMD (/usr/lib/sa/sa1 1 1)",
    "kernel: [{up}] IPv6: ADDRCONF(NETDEV_CHANGE): cali{port}: link becomes ready",
    "kernel: [{up}] EXT4-fs (md127p3): re-mounted. Quota mode: none.",
    "slurmd[{pid}]: launch task StepId={port}.0 request from UID:1000 GID:1000 HOST:10.0.{a}.{b}",
    'containerd[{pid}]: level=info msg="shim disconnected" id={port}{a}{b}',
    "nvidia-persistenced[{pid}]: device 0000:{a:02x}:00.0 - persistence mode enabled.",
]
_MEANINGFUL = [
    "kernel: [{up}] NVRM: Xid (PCI:0000:{a:02x}:00): {xid}, pid={pid}, name=python3, "
    "Ch 0000000{b}, errorString CTX SWITCH TIMEOUT, Info 0x{port:x}",
    "kernel: [{up}] NVRM: Xid (PCI:0000:{a:02x}:00): 79, pid='<unknown>', name=<unknown>, "
    "GPU has fallen off the bus.",
    "kernel: [{up}] mlx5_core 0000:{a:02x}:00.0 mlx5_{b}: Port: 1 Link DOWN",
    "kernel: [{up}] pcieport 0000:00:01.0: AER: Corrected error received: 0000:{a:02x}:00.0",
    "kernel: [{up}] INFO: task python3:{pid} blocked for more than 120 seconds.",
]
_STATES = ["COMPLETED"] * 6 + ["FAILED", "TIMEOUT", "NODE_FAIL", "CANCELLED by 1003"]
SACCT_HEADER = (
    "JobID|JobIDRaw|JobName|User|Account|Partition|State|ExitCode|Submit|Start|End|Elapsed|"
    "NNodes|NodeList|AllocTRES"
)


def _render(rng: random.Random, template: str) -> str:
    return template.format(
        pid=rng.randint(100, 4_000_000),
        a=rng.randint(1, 250),
        b=rng.randint(0, 9),
        port=rng.randint(1024, 65535),
        up=f"{rng.uniform(1, 900000):12.6f}",
        xid=rng.choice((13, 31, 43, 45, 48, 63, 74, 94, 109, 119)),
    )


@lru_cache(maxsize=4)
def _pool(seed: int, hit_share: float) -> tuple[str, ...]:
    """Rendered lines to draw from: ``hit_share`` of them GPU/RAS lines, the rest noise."""
    rng = random.Random(seed)
    n_hits = int(20_000 * hit_share)
    noise = [_render(rng, rng.choice(_NOISE)) for _ in range(20_000 - n_hits)]
    hits = [_render(rng, rng.choice(_MEANINGFUL)) for _ in range(n_hits)]
    return tuple(noise + hits)


def write_kernel_log(
    path: Path,
    size_bytes: int,
    *,
    node: str,
    seed: int = 7,
    days: int = 3,
    hit_share: float = 0.05,
) -> int:
    """A syslog-style kernel log of about ``size_bytes`` for ``node``, spread over ``days`` days
    (Jan 1 onwards, ordered); returns the number of lines."""
    rng = random.Random(seed)
    pool = _pool(seed % 4, hit_share)
    path.parent.mkdir(parents=True, exist_ok=True)
    written = lines = 0
    batch_n = 20_000
    est_lines = max(size_bytes // 110, 1)
    t0 = datetime(2026, 1, 1)
    step = timedelta(days=days) / est_lines
    with path.open("wb") as f:
        while written < size_bytes:
            stamp = (t0 + step * lines).strftime("%b %e %H:%M:%S")
            prefix = f"{stamp} {node} "
            body = rng.choices(pool, k=batch_n)
            data = (prefix + ("\n" + prefix).join(body) + "\n").encode()
            if written + len(data) > size_bytes and lines:
                cut = data.rfind(b"\n", 0, max(size_bytes - written, 1)) + 1
                data = data[:cut] if cut > 0 else data
            f.write(data)
            written += len(data)
            lines += data.count(b"\n")
    return lines


def write_sacct(path: Path, n_jobs: int, *, seed: int = 11, first_id: int = 1000) -> int:
    """``sacct --parsable2`` output: ``n_jobs`` jobs with a batch step each; returns lines."""
    rng = random.Random(seed)
    t0 = datetime(2026, 1, 1)
    out = [SACCT_HEADER]
    for i in range(n_jobs):
        jid = first_id + i
        submit = t0 + timedelta(minutes=17 * i)
        start = submit + timedelta(seconds=rng.randint(0, 600))
        dur = timedelta(seconds=rng.randint(60, 36_000))
        end = start + dur
        state = rng.choice(_STATES)
        code = (
            "0:0"
            if state.startswith(("COMPLETED", "CANCELLED", "NODE_FAIL"))
            else ("0:15" if state == "TIMEOUT" else f"{rng.randint(1, 3)}:0")
        )
        n = rng.choice((1, 2, 4))
        lo = rng.randint(0, 60)
        nodes = f"gpu-[{lo:03d}-{lo + n - 1:03d}]" if n > 1 else f"gpu-{lo:03d}"
        el = str(dur).rjust(8, "0")
        fmt = "%Y-%m-%dT%H:%M:%S"
        s, b, e = submit.strftime(fmt), start.strftime(fmt), end.strftime(fmt)
        tres = f"billing={8 * n},cpu={8 * n},gres/gpu={8 * n},node={n}"
        out.append(
            f"{jid}|{jid}|train_{i % 7}|u{i % 5}|research|gpu|{state}|{code}|{s}|{b}|{e}|"
            f"{el}|{n}|{nodes}|{tres}"
        )
        out.append(
            f"{jid}.batch|{jid}.batch|batch||research||{state.split()[0]}|{code}|{b}|{b}|"
            f"{e}|{el}|1|gpu-{lo:03d}|cpu=8,gres/gpu=8,mem=64G,node=1"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(out) + "\n")
    return len(out)


def write_slurmctld(path: Path, n_events: int, *, seed: int = 13) -> int:
    """A slurmctld log with node-down / requeue / drain events among ordinary lines."""
    rng = random.Random(seed)
    t0 = datetime(2026, 1, 1)
    out = []
    for i in range(n_events):
        ts = (t0 + timedelta(seconds=97 * i)).strftime("[%Y-%m-%dT%H:%M:%S.000]")
        node = f"gpu-{rng.randint(0, 63):03d}"
        kind = rng.random()
        if kind < 0.1:
            out.append(f"{ts} error: Nodes {node} not responding, setting DOWN")
        elif kind < 0.15:
            out.append(f"{ts} requeue job JobId={1000 + i} due to failure of node {node}")
        elif kind < 0.2:
            out.append(f"{ts} update_node: node {node} reason set to: Xid 79 GPU has fallen")
        else:
            out.append(f"{ts} _job_complete: JobId={1000 + i} done")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(out) + "\n")
    return len(out)


def make_tree(root: Path, total_bytes: int, n_files: int, *, seed: int = 7) -> list[Path]:
    """``n_files`` per-node kernel logs totalling ``total_bytes`` plus one sacct file and one
    slurmctld log under ``root``; returns the files."""
    files = []
    per = max(total_bytes // max(n_files, 1), 1)
    for i in range(n_files):
        p = root / f"gpu-{i:03d}" / "kern.log"
        write_kernel_log(p, per, node=f"gpu-{i:03d}", seed=seed + i)
        files.append(p)
    write_sacct(root / "slurm" / "sacct.txt", 200, seed=seed)
    write_slurmctld(root / "slurm" / "slurmctld.log", 500, seed=seed)
    files += [root / "slurm" / "sacct.txt", root / "slurm" / "slurmctld.log"]
    return files


def run_one(mode: str, tree: str, db: str, scratch: str) -> None:
    """Child process: ingest ``tree`` in ``mode`` (plain | dask1 | dask2); print JSON."""
    from faultlens.ingest.pipeline import ingest_paths
    from faultlens.ingest.store import Store

    now = datetime(2026, 2, 1)
    t0 = time.perf_counter()
    if mode == "plain":
        with Store(db) as store:
            report = ingest_paths(store, [tree], now=now, scratch=scratch)
            events = store.count("events")
        setup = 0.0
    else:
        from distributed import Client, LocalCluster

        n = int(mode.removeprefix("dask"))
        with (
            LocalCluster(
                n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None
            ) as cluster,
            Client(cluster) as client,
        ):
            setup = time.perf_counter() - t0
            with Store(db) as store:
                report = ingest_paths(store, [tree], now=now, executor=client, scratch=scratch)
                events = store.count("events")
    wall = time.perf_counter() - t0
    print(
        json.dumps(
            {
                "mode": mode,
                "wall_s": wall,
                "cluster_start_s": setup,
                "totals": report.totals,
                "events": events,
            }
        )
    )


def _child(mode: str, tree: Path, tmp: Path) -> dict:
    db = tmp / f"{mode}.duckdb"
    scratch = tmp / f"scratch-{mode}"
    scratch.mkdir(exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "bench.bench_scale",
        "--run-one",
        mode,
        str(tree),
        str(db),
        str(scratch),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} failed: {proc.stderr[-3000:]}")
    db.unlink(missing_ok=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-gb", type=float, default=10.0)
    ap.add_argument("--files", type=int, default=40, help="number of kernel logs")
    ap.add_argument("--modes", default="plain,dask1,dask2")
    ap.add_argument("--tmp", default=None, help="folder for the generated logs [default: /tmp]")
    ap.add_argument(
        "--tree",
        default=None,
        help="keep the generated logs in this folder and reuse them on the next run",
    )
    ap.add_argument(
        "--run-one", nargs=4, metavar=("MODE", "TREE", "DB", "SCRATCH"), help=argparse.SUPPRESS
    )
    args = ap.parse_args(argv)
    if args.run_one:
        run_one(*args.run_one)
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="faultlens-scale-", dir=args.tmp))
    try:
        tree = Path(args.tree) if args.tree else tmp / "logs"
        t0 = time.perf_counter()
        files = sorted(p for p in tree.rglob("*") if p.is_file()) if tree.is_dir() else []
        if not files:
            files = make_tree(tree, int(args.size_gb * 1e9), args.files)
        gen_s = time.perf_counter() - t0
        size = sum(f.stat().st_size for f in files)
        subprocess.run(["cat", *map(str, files)], stdout=subprocess.DEVNULL, check=True)
        load_before = os.getloadavg()
        results = [_child(m, tree, tmp) for m in args.modes.split(",")]
        load_after = os.getloadavg()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _write(results, size, len(files), gen_s, (load_before, load_after))
    return 0


def _write(
    results: list[dict],
    size: int,
    n_files: int,
    gen_s: float,
    load: tuple[tuple[float, ...], tuple[float, ...]],
) -> None:
    base = next((r["wall_s"] for r in results if r["mode"] == "plain"), results[0]["wall_s"])
    names = {
        "plain": "plain local (workers=1)",
        "dask1": "Dask LocalCluster, 1 worker",
        "dask2": "Dask LocalCluster, 2 workers",
    }
    t = results[0]["totals"]
    lines = [
        f"Input: {size / 1e9:.2f} GB in {n_files} files ({t['lines']:,} lines; "
        f"{t['parsed']:,} parsed, {t['noise']:,} noise, {t['quarantined']:,} quarantined); "
        f"generated in {gen_s:.0f} s.",
        f"Load average (1/5/15 min) before {[round(x, 2) for x in load[0]]}, after "
        f"{[round(x, 2) for x in load[1]]}, on {os.cpu_count()} cores.",
        "",
        "| path | GB | wall s | of which cluster start s | MB/s | speedup vs plain |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {names.get(r['mode'], r['mode'])} | {size / 1e9:.2f} | {r['wall_s']:.1f} | "
            f"{r['cluster_start_s']:.1f} | {size / 1e6 / r['wall_s']:.1f} | "
            f"{base / r['wall_s']:.2f} |"
        )
    md = "\n".join(lines) + "\n"
    print(md)
    OUT.mkdir(exist_ok=True)
    (OUT / "bench_scale.md").write_text(md)
    (OUT / "bench_scale.json").write_text(
        json.dumps(
            {
                "bytes": size,
                "files": n_files,
                "generate_s": gen_s,
                "load": load,
                "results": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    sys.exit(main())

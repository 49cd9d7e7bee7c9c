"""Peak memory of reading big JSON documents, streamed against the whole document.

    python -m bench.bench_prom_stream [--mb 20 200] [--sacct-mb 50] [--keep DIR]

Prometheus range exports of each ``--mb`` size and a ``sacct --json`` document of ``--sacct-mb``
(jobs with one step each, pretty-printed as ``sacct --json`` prints them).

Generates ``query_range`` answers of each size (one series per line, as ``jq -c`` writes them;
GPU temperatures of 15 s steps, 10,000 points per series, written a series at a time), then parses
each file to its Parquet parts (``pipeline.parse_file``: the read, not the DuckDB load, whose memory
DuckDB's ``memory_limit`` bounds) in a fresh process per run:

- ``streamed``: the default for exports of ``STREAM_MIN_BYTES`` or more;
- ``whole document`` (the baseline, what every export went through before): the file read whole.

Each run reports its wall time, its resident memory after the imports, and its peak resident
memory (``ru_maxrss``); the figure to hold against the target (peak <= 2 x a 64 MiB window,
whatever the file size) is the peak above the imports. Prints a markdown table, writes it to
``bench/out/``. Record ``uptime`` with it: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"
T0 = 1_721_000_000
POINTS = 10_000

CHILD = r"""
import json, resource, sys, time, shutil
import psutil
from faultlens.ingest.pipeline import parse_file, plan
from faultlens.ingest.store import Store
from faultlens.ingest.telemetry.prom import PrometheusJsonParser

import faultlens.ingest.telemetry.prom as prom
from faultlens.ingest.slurm.json_docs import SlurmJsonParser
path, mode, batch, fmt = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
if mode == "whole":
    PrometheusJsonParser.stream_min_bytes = 1 << 62
    SlurmJsonParser.stream_min_bytes = 1 << 62
if batch:
    prom.BATCH_POINTS = batch
with Store(":memory:") as store:
    task = plan(store, path, fmt=fmt)
base = psutil.Process().memory_info().rss
t = time.perf_counter()
pf = parse_file(task)
wall = time.perf_counter() - t
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
import polars as pl
table = "telemetry" if fmt == "prometheus_json" else "jobs"
rows = pl.scan_parquet(pf.parts[table]).select(pl.len()).collect().item()
shutil.rmtree(pf.scratch, ignore_errors=True)
print(json.dumps({"wall_s": wall, "base": base, "peak": peak, "rows": rows,
                  "lines": pf.lines, "parsed": pf.parsed, "quarantined": pf.quarantined}))
"""


def write_export(path: Path, mb: float) -> int:
    """An export of about ``mb`` MB, a series at a time; returns the number of points."""
    target = mb * 1e6
    n = written = 0
    with path.open("w") as f:
        f.write('{"status":"success","data":{"resultType":"matrix","result":[\n')
        s = 0
        while written < target:
            labels = json.dumps(
                {
                    "__name__": "DCGM_FI_DEV_GPU_TEMP",
                    "Hostname": f"gpu{s // 8:04d}",
                    "gpu": str(s % 8),
                    "UUID": f"GPU-{s:08d}",
                    "instance": "dcgm:9400",
                },
                separators=(",", ":"),
            )
            pts = ",".join(f'[{T0 + 15 * i},"{40 + (i + s) % 23}"]' for i in range(POINTS))
            line = ("," if s else "") + f'{{"metric":{labels},"values":[{pts}]}}\n'
            f.write(line)
            written += len(line)
            n += POINTS
            s += 1
        f.write("]}}\n")
    return n


def write_sacct(path: Path, mb: float) -> int:
    """A ``sacct --json`` document of about ``mb`` MB (a job and its batch step per entry)."""
    target, n, written = mb * 1e6, 0, 0
    with path.open("w") as f:
        f.write('{\n  "jobs": [\n')
        while written < target:
            t0 = 1_721_000_000 + 600 * n
            job = {
                "account": "ml",
                "allocation_nodes": 2,
                "array": {"job_id": 0, "task_id": {"set": False, "infinite": False, "number": 0}},
                "association": {"account": "ml", "cluster": "c", "user": f"u{n % 50}"},
                "exit_code": {"status": ["SUCCESS"], "return_code": {"set": True, "number": 0}},
                "job_id": 100000 + n,
                "name": f"train-{n}",
                "nodes": f"gpu[{n % 100:03d}-{n % 100 + 1:03d}]",
                "partition": "gpu",
                "state": {"current": ["FAILED" if n % 9 == 0 else "COMPLETED"], "reason": "None"},
                "time": {"submission": t0, "start": t0 + 5, "end": t0 + 500, "elapsed": 495},
                "tres": {
                    "allocated": [{"type": "gres", "name": "gpu", "id": 1001, "count": 16}],
                    "requested": [{"type": "gres", "name": "gpu", "id": 1001, "count": 16}],
                },
                "steps": [
                    {
                        "step": {"id": f"{100000 + n}.batch", "name": "batch"},
                        "nodes": {"range": f"gpu{n % 100:03d}"},
                        "state": ["COMPLETED"],
                        "time": {"start": t0 + 5, "end": t0 + 500, "elapsed": 495},
                        "exit_code": {"return_code": {"set": True, "number": 0}},
                    }
                ],
            }
            text = ("    ,\n" if n else "") + "    " + json.dumps(job, indent=2) + "\n"
            f.write(text)
            written += len(text)
            n += 1
        f.write('  ],\n  "meta": {},\n  "errors": [],\n  "warnings": []\n}\n')
    return n


def run(path: Path, mode: str, batch: int = 0, fmt: str = "prometheus_json") -> dict:
    env = {**os.environ, "POLARS_MAX_THREADS": os.environ.get("POLARS_MAX_THREADS", "2")}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), mode, str(batch), fmt],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, nargs="+", default=[20, 200])
    ap.add_argument("--sacct-mb", type=float, nargs="*", default=[50])
    ap.add_argument("--keep", type=Path, help="folder for the generated exports (kept)")
    ap.add_argument("--batch-points", type=int, default=0, help="streamed batch size to try")
    args = ap.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="faultlens-bench-prom-"))
    folder.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    rows = []
    try:
        for mb in args.mb:
            path = folder / f"range-{mb:g}mb.json"
            points = write_export(path, mb)
            size = path.stat().st_size
            for mode, label in (("stream", "streamed"), ("whole", "whole document (baseline)")):
                r = run(path, mode, args.batch_points if mode == "stream" else 0)
                if r["rows"] != points or r["quarantined"]:
                    raise SystemExit(f"{label}: {r['rows']} rows of {points}, {r}")
                rows.append((size, f"Prometheus, {label}", r))
        for mb in args.sacct_mb:
            path = folder / f"sacct-{mb:g}mb.json"
            jobs = write_sacct(path, mb)
            size = path.stat().st_size
            for mode, label in (("stream", "streamed"), ("whole", "whole document (baseline)")):
                r = run(path, mode, 0, "sacct_json")
                if r["rows"] != jobs or r["quarantined"]:
                    raise SystemExit(f"sacct {label}: {r['rows']} jobs of {jobs}, {r}")
                rows.append((size, f"sacct, {label}", r))
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    mib = 1 << 20
    lines = [
        f"load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1 / 5 / 15 min), "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
        "| document | read | rows | wall (s) | RSS after imports (MiB) | peak RSS (MiB) "
        "| peak above imports (MiB) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for size, label, r in rows:
        lines.append(
            f"| {size / 1e6:,.0f} MB | {label} | {r['rows']:,} | {r['wall_s']:.1f} "
            f"| {r['base'] / mib:,.0f} | {r['peak'] / mib:,.0f} "
            f"| {(r['peak'] - r['base']) / mib:,.0f} |"
        )
    text = "\n".join(lines)
    print(text)
    OUT.mkdir(exist_ok=True)
    (OUT / "bench_prom_stream.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

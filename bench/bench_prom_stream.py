"""Peak memory of reading a Prometheus range export: streamed (ijson) against the whole document.

    python -m bench.bench_prom_stream [--mb 50 200] [--keep DIR]

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
path, mode, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
if mode == "whole":
    PrometheusJsonParser.stream_min_bytes = 1 << 62
if batch:
    prom.BATCH_POINTS = batch
with Store(":memory:") as store:
    task = plan(store, path, fmt="prometheus_json")
base = psutil.Process().memory_info().rss
t = time.perf_counter()
pf = parse_file(task)
wall = time.perf_counter() - t
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
import polars as pl
rows = pl.scan_parquet(pf.parts["telemetry"]).select(pl.len()).collect().item()
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


def run(path: Path, mode: str, batch: int = 0) -> dict:
    env = {**os.environ, "POLARS_MAX_THREADS": os.environ.get("POLARS_MAX_THREADS", "2")}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), mode, str(batch)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, nargs="+", default=[50, 200])
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
                rows.append((size, label, r))
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    mib = 1 << 20
    lines = [
        f"load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1 / 5 / 15 min), "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
        "| export | read | points | wall (s) | RSS after imports (MiB) | peak RSS (MiB) "
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

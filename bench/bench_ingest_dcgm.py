"""GPU telemetry ingest speed: ``grep -c`` vs faultlens, on generated dcgm-exporter data.

    python -m bench.bench_ingest_dcgm --size-gb 1            # both formats (JSON: 200 MB)
    python -m bench.bench_ingest_dcgm --format json --json-mb 200

Two inputs, each generated in a temp folder and timed in the same run:

- ``scrape``: a file of repeated dcgm-exporter ``/metrics`` scrapes (many nodes x 8 GPUs x 12
  DCGM fields, with ``# HELP`` / ``# TYPE`` lines, the exporter's usual labels and millisecond
  sample stamps, one Xid 79 episode), ``--size-gb`` large;
- ``json``: a Prometheus ``query_range`` export of the same series (``matrix``, one series per
  line as the demo's synthetic cluster writes it: nodes x 8 GPUs x 12 fields x 1,440 points),
  ``--json-mb`` large.

For each, in its own process: (a) ``LC_ALL=C grep -c`` of one metric name; (b) faultlens ingest of
the file into a fresh DuckDB through ``ingest.pipeline.ingest_paths`` (parse, normalize, write).
Wall time includes interpreter start-up; peak RSS comes from ``wait4`` on that process alone.
Prints a markdown table per format and writes it with the raw numbers to ``bench/out/``
(targets for the scrape: >= 1M telemetry rows/s, peak RSS <= 1 GiB).
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
REPO = Path(__file__).resolve().parents[1]
FIELDS = [
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot."),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows."),
]
PCI = ["19", "3B", "4C", "5D", "9B", "BB", "CB", "DB"]
T0_MS = 1_721_001_600_000  # 2024-07-15 00:00:00 UTC
STEP_MS = 15_000


def _heads(nodes: int) -> list[tuple[str, list[str]]]:
    out = []
    for name, _typ, _help in FIELDS:
        heads = []
        for n in range(nodes):
            for g in range(8):
                heads.append(
                    f'{name}{{gpu="{g}",UUID="GPU-{n:08x}-{g:04x}-4c1e-9e63-0068f178c4a9",'
                    f'pci_bus_id="00000000:{PCI[g]}:00.0",device="nvidia{g}",'
                    f'modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-{n:04d}",'
                    f'DCGM_FI_DRIVER_VERSION="535.161.08"}}'
                )
        out.append((name, heads))
    return out


def generate(path: Path, size_bytes: int, nodes: int = 32) -> dict[str, int]:
    """Write scrapes until the file reaches ``size_bytes``; returns counts."""
    heads = _heads(nodes)
    written = samples = lines = scrapes = 0
    with path.open("w") as f:
        while written < size_bytes:
            ts = T0_MS + scrapes * STEP_MS
            block: list[str] = []
            for (name, typ, help_), (_, hs) in zip(FIELDS, heads, strict=True):
                block += [f"# HELP {name} {help_}", f"# TYPE {name} {typ}"]
                if name == "DCGM_FI_DEV_XID_ERRORS":
                    vals = ["79" if i == 13 and 40 <= scrapes < 60 else "0" for i in range(len(hs))]
                else:
                    vals = [str(30 + (i + scrapes) % 50) for i in range(len(hs))]
                block += [f"{h} {v} {ts}" for h, v in zip(hs, vals, strict=True)]
                samples += len(hs)
            text = "\n".join(block) + "\n"
            f.write(text)
            written += len(text)
            lines += len(block)
            scrapes += 1
    return {"bytes": path.stat().st_size, "lines": lines, "samples": samples, "scrapes": scrapes}


JSON_POINTS = 1_440  # points per series (a day at one per minute)
JSON_STEP_S = 60


def generate_json(path: Path, size_bytes: int) -> dict[str, int]:
    """Write a ``query_range`` export of about ``size_bytes`` (one series per line)."""
    nodes, samples, lines = 0, 0, 2
    stamps = [f'[{T0_MS // 1000 + i * JSON_STEP_S},"' for i in range(JSON_POINTS)]
    with path.open("w") as f:
        f.write('{"status":"success","data":{"resultType":"matrix","result":[\n')
        written, sep = 0, ""
        while written < size_bytes:
            for name, _typ, _help in FIELDS:
                for g in range(8):
                    labels = json.dumps(
                        {
                            "__name__": name,
                            "gpu": str(g),
                            "UUID": f"GPU-{nodes:08x}-{g:04x}-4c1e-9e63-0068f178c4a9",
                            "pci_bus_id": f"00000000:{PCI[g]}:00.0",
                            "device": f"nvidia{g}",
                            "modelName": "NVIDIA H100 80GB HBM3",
                            "Hostname": f"gpu-{nodes:04d}",
                            "DCGM_FI_DRIVER_VERSION": "535.161.08",
                            "instance": f"gpu-{nodes:04d}:9400",
                            "job": "dcgm-exporter",
                        },
                        separators=(",", ":"),
                    )
                    if name != "DCGM_FI_DEV_XID_ERRORS":
                        vals = [30 + (i + g) % 50 for i in range(JSON_POINTS)]
                    else:  # one Xid 79 episode, on GPU 5 of the first node
                        vals = [
                            79 if (nodes, g) == (0, 5) and 40 <= i < 60 else 0
                            for i in range(JSON_POINTS)
                        ]
                    points = ",".join([f'{st}{v}"]' for st, v in zip(stamps, vals, strict=True)])
                    text = f'{sep}{{"metric":{labels},"values":[{points}]}}'
                    f.write(text)
                    written += len(text)
                    sep = ",\n"
                    samples += JSON_POINTS
                    lines += 1
            nodes += 1
        f.write("\n]}}\n")
    return {
        "bytes": path.stat().st_size,
        "lines": lines,
        "samples": samples,
        "scrapes": 0,
        "series": lines - 2,
    }


def _run(
    cmd: list[str], env: dict[str, str] | None = None, ok: tuple[int, ...] = (0,)
) -> dict[str, object]:
    """Run ``cmd``: wall seconds, its own peak RSS (MiB, from wait4) and stdout."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=REPO)
    assert proc.stdout is not None and proc.stderr is not None
    out = proc.stdout.read()
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    proc.returncode = code
    if code not in ok:
        raise RuntimeError(f"{cmd[0]} failed ({code}): {err.decode()[-2000:]}")
    return {"wall_s": wall, "rss_mib": usage.ru_maxrss / 1024, "stdout": out.decode().strip()}


def run_faultlens(path: str, db: str) -> None:
    """Entry point of the child process: ingest one file, print the report as JSON."""
    from datetime import datetime

    from faultlens.ingest.pipeline import ingest_paths
    from faultlens.ingest.store import Store

    with Store(db) as store:
        report = ingest_paths(store, [path], now=datetime(2025, 3, 1))
        rows = {t: store.count(t) for t in ("telemetry", "gpus", "events")}
    f = report.files[0]
    print(
        json.dumps(
            {
                "status": f.status,
                "format": f.format,
                "lines": f.lines,
                "parsed": f.parsed,
                "noise": f.noise,
                "quarantined": f.quarantined,
                "rows": rows,
                "error": f.error,
            }
        )
    )


def bench_one(fmt: str, tmp: Path, size_bytes: int) -> dict:
    """Generate one input, time grep and faultlens on it; returns the results."""
    path = tmp / ("dcgm-metrics.prom" if fmt == "scrape" else "prometheus_range.json")
    t0 = time.perf_counter()
    counts = generate(path, size_bytes) if fmt == "scrape" else generate_json(path, size_bytes)
    gen_s = time.perf_counter() - t0
    size_mb = counts["bytes"] / 1e6
    subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)  # warm
    pattern = "DCGM_FI_DEV_GPU_TEMP"
    grep = _run(["grep", "-c", pattern, str(path)], {**os.environ, "LC_ALL": "C"}, ok=(0, 1))
    db = tmp / f"bench-{fmt}.duckdb"
    fl = _run(
        [sys.executable, "-m", "bench.bench_ingest_dcgm", "--run-faultlens", str(path), str(db)]
    )
    path.unlink()
    db.unlink(missing_ok=True)
    report = json.loads(str(fl["stdout"]).splitlines()[-1])
    telemetry_rows = report["rows"]["telemetry"]
    results = {
        "format": fmt,
        "size_mb": size_mb,
        **counts,
        "generate_s": gen_s,
        "grep": {
            "pattern": pattern,
            "wall_s": grep["wall_s"],
            "mb_s": size_mb / grep["wall_s"],
            "matches": int(str(grep["stdout"])),
            "rss_mib": grep["rss_mib"],
        },
        "faultlens": {
            "wall_s": fl["wall_s"],
            "mb_s": size_mb / fl["wall_s"],
            "rows_s": telemetry_rows / fl["wall_s"],
            "peak_rss_mib": fl["rss_mib"],
            **report,
        },
        "load_avg": os.getloadavg(),
    }
    results["ratio_faultlens_grep"] = results["faultlens"]["mb_s"] / results["grep"]["mb_s"]
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-gb", type=float, default=1.0, help="size of the scrape file")
    ap.add_argument(
        "--json-mb",
        type=float,
        default=None,
        help="size of the query_range export (default: 200 MB, scaled down with --size-gb below 1)",
    )
    ap.add_argument("--format", choices=("scrape", "json", "both"), default="both")
    ap.add_argument("--keep", action="store_true", help="keep the temp folder")
    ap.add_argument("--run-faultlens", nargs=2, metavar=("PATH", "DB"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.run_faultlens:
        run_faultlens(*args.run_faultlens)
        return 0
    json_mb = args.json_mb if args.json_mb is not None else 200 * min(1.0, args.size_gb)
    sizes = {"scrape": int(args.size_gb * 1024**3), "json": int(json_mb * 1e6)}
    fmts = ["scrape", "json"] if args.format == "both" else [args.format]
    tmp = Path(tempfile.mkdtemp(prefix="faultlens-bench-dcgm-"))
    OUT.mkdir(exist_ok=True)
    try:
        for fmt in fmts:
            results = bench_one(fmt, tmp, sizes[fmt])
            table = render(results)
            print(table + "\n", flush=True)
            stem = "bench_ingest_dcgm" if fmt == "scrape" else "bench_ingest_prom_json"
            (OUT / f"{stem}.json").write_text(json.dumps(results, indent=2))
            (OUT / f"{stem}.md").write_text(table + "\n")
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


def render(r: dict) -> str:
    fl, gr = r["faultlens"], r["grep"]
    what = (
        f"{r['scrapes']:,} scrapes"
        if r["format"] == "scrape"
        else f"{r['series']:,} series x {JSON_POINTS:,} points"
    )
    rows = [
        "| approach | wall s | MB/s | rows/s | peak RSS MiB |",
        "|---|---:|---:|---:|---:|",
        f"| `LC_ALL=C grep -c {gr['pattern']}` | {gr['wall_s']:.2f} | {gr['mb_s']:.0f} | "
        f"({gr['matches']:,} matching lines) | {gr['rss_mib']:.0f} |",
        f"| faultlens ingest -> DuckDB | {fl['wall_s']:.2f} | {fl['mb_s']:.0f} | "
        f"{fl['rows_s']:,.0f} | {fl['peak_rss_mib']:.0f} |",
    ]
    target = (
        f" (target >= 1,000,000); peak RSS {fl['peak_rss_mib']:.0f} MiB (target <= 1024)"
        if r["format"] == "scrape"
        else f"; peak RSS {fl['peak_rss_mib']:.0f} MiB"
    )
    return "\n".join(
        [
            f"### {r['format']}",
            "",
            f"File: {r['size_mb']:.0f} MB, {r['lines']:,} lines, {r['samples']:,} samples "
            f"({what}); faultlens ({fl['format']}, status {fl['status']}): "
            f"{fl['parsed']:,} parsed, {fl['noise']:,} noise, {fl['quarantined']:,} quarantined; "
            f"rows {fl['rows']}. Load average during the run: "
            f"{', '.join(f'{x:.1f}' for x in r['load_avg'])}.",
            "",
            *rows,
            "",
            f"faultlens / grep = {r['ratio_faultlens_grep']:.2f}; telemetry rows/s "
            f"{fl['rows_s']:,.0f}{target}.",
        ]
    )


if __name__ == "__main__":
    sys.exit(main())

"""Run every benchmark in sequence (``make bench``); each prints its own markdown table.

The ingest benchmarks default to 1 GB inputs generated on the fly in a temp folder; pass
``--quick`` for small inputs that check the benchmarks run (not figures to quote).
"""

from __future__ import annotations

import argparse
import subprocess
import sys

BENCHES: dict[str, tuple[list[str], list[str]]] = {
    # name: (full arguments, --quick arguments)
    "bench.bench_ingest": (["--size-gb", "1"], ["--size-gb", "0.05"]),
    "bench.bench_ingest_nccl": (["--size-gb", "1"], ["--size-gb", "0.05"]),
    "bench.bench_ingest_dcgm": (["--size-gb", "1"], ["--size-gb", "0.05"]),
    "bench.bench_replay": ([], ["--resamples", "5"]),
    "bench.bench_models": ([], ["--nodes", "500", "--days", "14"]),
    "bench.bench_scale": (["--size-gb", "10"], ["--size-gb", "0.2"]),
    "bench.bench_dashboard": ([], ["--events", "1000000"]),
    "bench.bench_first_load": ([], ["--tries", "1"]),  # on the database bench_dashboard built
    "bench.bench_refresh": ([], ["--small", "20000", "--large", "200000"]),
    "bench.bench_status": ([], ["--small", "5000", "--large", "50000"]),
    "bench.bench_prom_stream": ([], ["--mb", "10", "20"]),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small inputs, to check the benches run")
    ap.add_argument("--only", nargs="*", help="run only these (e.g. bench.bench_replay)")
    args = ap.parse_args()
    failed = []
    for name, (full, quick) in BENCHES.items():
        if args.only and name not in args.only:
            continue
        print(f"\n## {name}\n", flush=True)
        rc = subprocess.call([sys.executable, "-m", name, *(quick if args.quick else full)])
        if rc != 0:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

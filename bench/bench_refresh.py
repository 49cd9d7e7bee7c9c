"""The scheduled job's cost against the size of the history: `faultlens run` and `refresh`.

    python -m bench.bench_refresh [--small 500000] [--large 5000000] [--keep DIR]

Generates two databases that differ only in how much history they hold (``--small`` and
``--large`` events over the same 128 nodes, jobs and inventory in proportion), refreshes each once
(the state after the ingests that built them), trains one model on the small one, and then times,
each in its own process:

- `faultlens run` with nothing new (its one configured log unchanged);
- `faultlens run` after a live log grew by a few Xid lines (ingest, incremental refresh, predict);
- in one process, the incremental refresh after such an append, and the full rebuild (what every
  ingest and run did before) as the baseline.

Prints a markdown table with the large/small ratio of each, and writes it to ``bench/out/``.
The history is generated in DuckDB with one INSERT ... SELECT per table, so it takes seconds.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"
T0 = datetime(2026, 1, 1)
DAYS = 60
NODES = 128
MODEL_EVENTS = 50_000
PCI = [f"0000:{b:02x}:00.0" for b in (0x1B, 0x29, 0x3B, 0x5E, 0x9A, 0xAB, 0xBA, 0xDB)]


def build(path: Path, n_events: int) -> None:
    """A database of ``n_events`` Xid / NCCL events and n_events / 250 jobs on 128 nodes."""
    from faultlens.ingest.catalog import load_catalog
    from faultlens.ingest.store import Store

    span_s = DAYS * 86400
    n_jobs = max(n_events // 250, 100)
    with Store(path) as store:
        store.load_xid_catalog(load_catalog())
        store.execute(
            "INSERT INTO gpus (node, gpu_index, pci_bus_id, last_seen, source, file) "
            "SELECT printf('gpu%03d', n), i, (?::VARCHAR[])[i + 1], ?::TIMESTAMP, "
            "'nvidia_smi', 'inventory' FROM range(?) a(n), range(8) b(i)",
            [PCI, T0, NODES],
        )
        store.execute(
            """
            INSERT INTO jobs (job_id, nodes, n_nodes, n_gpus, start, "end", elapsed_s, state,
                              file, line)
            SELECT CAST(1000000 + i AS VARCHAR),
                   [printf('gpu%03d', (i * 7 + k) % ?) FOR k IN range(1 + i % 4)],
                   1 + i % 4, 8 * (1 + i % 4), s, s + to_seconds(d), d,
                   CASE WHEN i % 3 = 0 THEN 'FAILED' WHEN i % 17 = 0 THEN 'NODE_FAIL'
                        ELSE 'COMPLETED' END, 'sacct.txt', i + 1
            FROM (SELECT i, ?::TIMESTAMP + to_seconds(CAST(hash(i) % ? AS BIGINT)) AS s,
                         CAST(600 + hash(i * 31) % 36000 AS BIGINT) AS d FROM range(?) r(i))
            """,
            [NODES, T0, span_s, n_jobs],
        )
        store.execute(
            """
            INSERT INTO events (ts, node, gpu, source, kind, code, severity, file, line)
            SELECT ?::TIMESTAMP + to_seconds(CAST(hash(i) % ? AS BIGINT)),
                   printf('gpu%03d', hash(i * 13) % ?), (?::VARCHAR[])[CAST(1 + hash(i * 5) % 8 AS BIGINT)],
                   CASE WHEN i % 10 = 0 THEN 'nccl' ELSE 'kernel' END,
                   CASE WHEN i % 10 = 0 THEN 'nccl_error' ELSE 'xid' END,
                   CASE WHEN i % 10 = 0 THEN NULL ELSE [13, 31, 43, 63, 92, 79, 48][CAST(1 + i % 7 AS BIGINT)] END,
                   'warning', printf('kern-%03d.log', i % ?), i // ? + 1
            FROM range(?) r(i)
            """,
            [T0, span_s, NODES, PCI, NODES, NODES, n_events],
        )
        store.execute("CHECKPOINT")


def write_log(path: Path, start: datetime, n: int) -> None:
    """``n`` syslog Xid lines of node gpu001 from ``start``, appended to ``path``."""
    with path.open("a") as f:
        for k in range(n):
            ts = start + timedelta(minutes=k)
            f.write(
                f"{ts:%Y-%m-%dT%H:%M:%S}+00:00 gpu001 kernel: NVRM: Xid (PCI:0000:3b:00): 79, "
                "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
            )


def timed(*args: str) -> tuple[float, str]:
    t = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "faultlens.app.cli", *args], capture_output=True, text=True
    )
    elapsed = time.perf_counter() - t
    if done.returncode not in (0, 4):
        raise SystemExit(f"faultlens {' '.join(args)} failed ({done.returncode}): {done.stderr}")
    return elapsed, done.stdout


def time_refresh(db: Path, log: Path, end: datetime) -> dict[str, float]:
    """In one process: a few appended lines ingested, then their refresh (incremental), and the
    full rebuild of the same database."""
    from faultlens.ingest.attribution import refresh
    from faultlens.ingest.pipeline import ingest_paths
    from faultlens.ingest.store import Store

    write_log(log, end - timedelta(minutes=10), 3)
    with Store(db) as store:
        ingest_paths(store, [str(log)], now=end)
        t = time.perf_counter()
        mode = refresh(store)["mode"]
        incremental_s = time.perf_counter() - t
        assert mode == "incremental", mode
        t = time.perf_counter()
        refresh(store, full=True)
        full_s = time.perf_counter() - t
    return {"refresh_appended_s": incremental_s, "refresh_full_s": full_s}


def train_model(folder: Path) -> Path:
    """One model for both databases, trained on a sparse history (the large ones have a
    critical Xid on every node every hour: a single class, nothing to learn)."""
    folder.mkdir(parents=True, exist_ok=True)
    db, models = folder / "f.duckdb", folder / "models"
    build(db, MODEL_EVENTS)
    end = T0 + timedelta(days=DAYS)
    timed("train", "--db", str(db), "--as-of", end.isoformat(), "--models-dir", str(models))
    return models


def measure(folder: Path, n_events: int, models: Path) -> dict[str, float]:
    db = folder / "f.duckdb"
    t = time.perf_counter()
    build(db, n_events)
    built_s = time.perf_counter() - t
    end = T0 + timedelta(days=DAYS)
    log = folder / "kern.log"
    write_log(log, end - timedelta(hours=1), 5)
    timed("ingest", str(log), "--db", str(db), "--quiet")  # the first full refresh, too
    config = folder / "faultlens.toml"
    config.write_text(
        f'[faultlens]\ndb = "{db}"\nmodels_dir = "{models}"\n[ingest]\npaths = ["{log}"]\n'
    )
    as_of = ["--as-of", end.isoformat()]
    row = {"events": n_events, "build_s": built_s}
    row["run_nothing_new_s"] = min(timed("run", "--config", str(config), *as_of)[0] for _ in "ab")
    write_log(log, end - timedelta(minutes=30), 3)
    row["run_appended_s"], _ = timed("run", "--config", str(config), *as_of)
    row.update(time_refresh(db, log, end))
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", type=int, default=500_000)
    ap.add_argument("--large", type=int, default=5_000_000)
    ap.add_argument("--keep", type=Path, help="keep the databases in this folder")
    args = ap.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="faultlens-bench-refresh-"))
    try:
        (base / "small").mkdir(parents=True, exist_ok=True)
        (base / "large").mkdir(parents=True, exist_ok=True)
        models = train_model(base / "model")
        small = measure(base / "small", args.small, models)
        large = measure(base / "large", args.large, models)
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)
    keys = ("run_nothing_new_s", "run_appended_s", "refresh_appended_s", "refresh_full_s")
    lines = [
        f"| measure | {args.small:,} events | {args.large:,} events | large / small |",
        "|---|---:|---:|---:|",
    ]
    for k in keys:
        ratio = large[k] / small[k] if small[k] else float("nan")
        lines.append(f"| {k} | {small[k]:.2f} | {large[k]:.2f} | {ratio:.2f} |")
    lines.append(f"| build_s (generation) | {small['build_s']:.1f} | {large['build_s']:.1f} | |")
    table = "\n".join(lines)
    print(table)
    OUT.mkdir(exist_ok=True)
    (OUT / "bench_refresh.md").write_text(table + "\n")
    (OUT / "bench_refresh.json").write_text(json.dumps({"small": small, "large": large}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

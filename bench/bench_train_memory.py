"""Peak memory of `train` on long histories: the unchunked path against training in node groups.

    python -m bench.bench_train_memory [--nodes 1500] [--days 365,3650] [--limit-gb 8]

Builds, in DuckDB (not through log files), a cluster of ``--nodes`` nodes over each history
length: 2% lemon nodes, hardware failures with precursor Xids hours before, application Xid /
NCCL noise and stray precursor-like Xids (the event model of ``bench.bench_models``, without its
telemetry). Then, each in its own process so that its peak RSS is its own:

- on the shortest history, the unchunked path (``node_group`` off) — the baseline — and the
  chunked path in four node groups;
- on every longer history, ``train_failure_model`` as `faultlens train` runs it under
  ``--max-memory-gb`` (chunked when the unchunked plan is over the limit), and the unchunked
  plan's estimate, which is not run when it is over the machine's memory.

Prints a markdown table (wall s, CPU s, peak GB, load average, rows, groups, test PR-AUC) and
writes it to ``bench/out/``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

from bench.bench_models import GENERATE

OUT = Path(__file__).resolve().parent / "out"
START = datetime(2015, 1, 1)


def generate(db: Path, n_nodes: int, days: int) -> dict:
    from faultlens.ingest.store import Store

    db.unlink(missing_ok=True)
    hours = days * 24
    t0 = time.perf_counter()
    with Store(db, memory_limit="4GB") as store:
        store.execute("SET threads = 1")  # deterministic random()
        params = [[], [n_nodes], [], [START, hours], [], [], [START, hours]]
        for sql, p in zip(GENERATE[:-1], params, strict=True):  # no telemetry
            store.execute(sql, p)
        store.execute("CHECKPOINT")
        counts = {"events": store.count("events"), "gpus": store.count("gpus")}
    return {"generate_s": round(time.perf_counter() - t0, 1), **counts}


def _peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2


def _cpu_s() -> float:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def stage_train(db: Path, days: int, mode: str, limit_gb: float) -> dict:
    """``mode``: ``unchunked`` (node groups off, plan ignored up to 64 GB), ``groups4`` (four
    node groups), ``auto`` (as `faultlens train` runs under ``limit_gb``)."""
    from faultlens.ingest.store import Store
    from faultlens.models.predictor import TrainConfig, data_range, train_failure_model

    as_of = START + timedelta(days=days)
    t0, c0 = time.perf_counter(), _cpu_s()
    with Store(db, read_only=True) as store:
        lo, hi = data_range(store, as_of)
        cfg = TrainConfig(max_memory_gb=limit_gb)
        if mode == "unchunked":
            cfg = TrainConfig(max_memory_gb=64.0)
        elif mode == "groups4":
            from faultlens.models.features import floor_hour, node_universe

            n = len(node_universe(store, floor_hour(lo), hi))
            cfg = TrainConfig(node_group=-(-n // 4))
        result = train_failure_model(store, as_of=as_of, cfg=cfg)
    card = result.card
    return {
        "mode": mode,
        "days": days,
        "seconds": round(time.perf_counter() - t0, 1),
        "cpu_seconds": round(_cpu_s() - c0, 1),
        "peak_gb": round(_peak_gb(), 2),
        "load_avg_1m": round(os.getloadavg()[0], 1),
        "nodes": card["nodes"],
        "rows": card["rows"],
        "chunked": card.get("chunked"),
        "pr_auc": card["metrics"]["model"]["pr_auc"],
        "lemon_pr_auc": card["metrics"]["lemon_baseline"]["pr_auc"],
    }


def plan_only(n_nodes: int, days: int, limit_gb: float) -> dict:
    from faultlens.models.plan import plan_training

    plan = plan_training(
        n_nodes,
        START,
        START + timedelta(days=days),
        test_fraction=0.25,
        calib_fraction=0.25,
        limit_gb=limit_gb,
    )
    return {"mode": "unchunked plan", "days": days, "estimate_gb": plan.estimate_gb}


def _child(*args: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "bench.bench_train_memory", *args],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    if done.returncode != 0:
        raise SystemExit(f"{args} failed: {done.stderr[-3000:]}")
    sys.stderr.write(done.stdout)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1500)
    ap.add_argument("--days", default="365,3650")
    ap.add_argument("--limit-gb", type=float, default=8.0)
    ap.add_argument("--tmp", type=Path, default=Path("/tmp"))
    ap.add_argument("--stage", nargs=4, metavar=("DB", "DAYS", "MODE", "LIMIT"))
    ap.add_argument("--generate", nargs=3, metavar=("DB", "NODES", "DAYS"))
    args = ap.parse_args()
    if args.generate:
        db, n, d = args.generate
        print(json.dumps(generate(Path(db), int(n), int(d))))
        return
    if args.stage:
        db, d, mode, limit = args.stage
        print(json.dumps(stage_train(Path(db), int(d), mode, float(limit))))
        return
    days = [int(d) for d in args.days.split(",")]
    rows = []
    for i, d in enumerate(days):
        db = args.tmp / f"bench_train_memory_{args.nodes}x{d}.duckdb"
        gen = _child("--generate", str(db), str(args.nodes), str(d))
        modes = ["unchunked", "groups4"] if i == 0 else ["auto"]
        for mode in modes:
            rows.append({**_child("--stage", str(db), str(d), mode, str(args.limit_gb)), **gen})
        if i > 0:
            rows.append({**plan_only(args.nodes, d, args.limit_gb), **gen})
        db.unlink(missing_ok=True)
    write_out(args.nodes, args.limit_gb, rows)


def write_out(n_nodes: int, limit_gb: float, rows: list[dict]) -> None:
    lines = [
        f"{n_nodes:,} nodes, events generated in DuckDB; memory limit {limit_gb:g} GB.",
        "",
        "| history | path | events | wall s | CPU s | peak GB | load 1m | train / calib / test "
        "rows | node groups | PR-AUC model / lemon |",
        "|---|---|---:|---:|---:|---:|---:|---|---|---|",
    ]
    for r in rows:
        if "estimate_gb" in r:
            lines.append(
                f"| {r['days']:,} d | unchunked (plan only, not run) | {r['events']:,} | | | "
                f"{r['estimate_gb']} (estimate) | | | | |"
            )
            continue
        ch = r["chunked"]
        groups = f"{ch['groups']} of {ch['node_group']}" if ch else "none"
        rr = r["rows"]
        lines.append(
            f"| {r['days']:,} d | {r['mode']} | {r['events']:,} | {r['seconds']} | "
            f"{r['cpu_seconds']} | {r['peak_gb']} | {r['load_avg_1m']} | "
            f"{rr['train']:,} / {rr['calib']:,} / {rr['test']:,} | {groups} | "
            f"{r['pr_auc']} / {r['lemon_pr_auc']} |"
        )
    md = "\n".join(lines) + "\n"
    print(md)
    OUT.mkdir(exist_ok=True)
    (OUT / "bench_train_memory.md").write_text(md)
    (OUT / "bench_train_memory.json").write_text(json.dumps(rows, indent=1, default=str))


if __name__ == "__main__":
    main()

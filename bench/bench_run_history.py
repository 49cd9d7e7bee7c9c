"""`faultlens run` with nothing new, against how long the history is (issue 15).

    python -m bench.bench_run_history [--sizes 500000,5000000,50000000] [--keep DIR]

A scheduled job runs for years: its database grows by *time*, at the fleet's own rate of events
per node and day. Each database here holds the same 128 nodes, the same rate (about 65 Xid / NCCL
events per node and day, a job per 4 h per 8 nodes, an 8-GPU inventory) and a history as long as
its event count needs (0.5M events: 60 days; 5M: 600 days; 50M: 6,000 days). Rows are inserted in
time order, as the scheduled ingests of a growing log write them. One model, trained on the
smallest database, scores every one.

Timed, each in its own process, with the configured log unchanged:

- `faultlens run --as-of END` (the configured log unchanged: no ingest, no refresh), the best of
  three runs after a first one (which scores and saves its prediction): nothing new, so each
  reuses it (``app.run_cache``);
- the baseline in the same run: the same command with the saved prediction dropped before each
  of three runs, so that it scores again (what every run did before the cache);
- in process, the stages of the prediction (``source_last_seen``, ``point_features``, the alert
  context), to say where time goes.

The other baseline is the smallest database, in the same run: the table gives each size's time
over it.
Prints a markdown table with the load average and writes it to ``bench/out/``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"
LAST_CPU_S = 0.0  # CPU time of the last ``faultlens`` command (its process and children)
T0 = datetime(2010, 1, 1)
NODES = 128
EVENTS_PER_DAY = 500_000 / 60  # the whole fleet's
PCI = [f"0000:{b:02x}:00.0" for b in (0x1B, 0x29, 0x3B, 0x5E, 0x9A, 0xAB, 0xBA, 0xDB)]


def days_for(n_events: int) -> int:
    return max(30, round(n_events / EVENTS_PER_DAY))


def build(path: Path, n_events: int, days: int | None = None, fresh: bool = True) -> datetime:
    """A database of ``n_events`` events at the fixed rate (or over ``days``), new or (``fresh``
    False) appended to what ``path`` holds; returns the end of its history."""
    from faultlens.ingest.catalog import load_catalog
    from faultlens.ingest.store import SUMMARY_FROM_TABLES, Store

    days = days or days_for(n_events)
    span_s = days * 86400
    n_jobs = max(n_events // 250, 100)
    if fresh:
        path.unlink(missing_ok=True)
    with Store(path) as store:
        if store.count("xid_catalog") == 0:
            store.load_xid_catalog(load_catalog())
        store.execute(
            "INSERT INTO gpus (node, gpu_index, pci_bus_id, last_seen, source, file) "
            "SELECT printf('gpu%03d', n), i, (?::VARCHAR[])[i + 1], ?::TIMESTAMP, "
            "'nvidia_smi', 'inventory' FROM range(?) a(n), range(8) b(i)",
            [PCI, T0, NODES],
        )
        # Jobs in start order, spread evenly over the history (a little jitter).
        store.execute(
            """
            INSERT INTO jobs (job_id, nodes, n_nodes, n_gpus, start, "end", elapsed_s, state,
                              file, line)
            SELECT CAST(1000000 + i AS VARCHAR),
                   [printf('gpu%03d', (i * 7 + k) % ?) FOR k IN range(1 + i % 4)],
                   1 + i % 4, 8 * (1 + i % 4), s, s + to_seconds(d), d,
                   CASE WHEN i % 3 = 0 THEN 'FAILED' WHEN i % 17 = 0 THEN 'NODE_FAIL'
                        ELSE 'COMPLETED' END, 'sacct.txt', i + 1
            FROM (SELECT i, ?::TIMESTAMP + to_seconds(CAST(i * (? / ?) AS BIGINT)) AS s,
                         CAST(600 + hash(i * 31) % 36000 AS BIGINT) AS d FROM range(?) r(i))
            ORDER BY i
            """,
            [NODES, T0, float(span_s), float(n_jobs), n_jobs],
        )
        store.execute(
            """
            INSERT INTO events (ts, node, gpu, source, kind, code, severity, file, line)
            SELECT ?::TIMESTAMP + to_seconds(CAST(i * (? / ?) + hash(i) % 60 AS BIGINT)),
                   printf('gpu%03d', hash(i * 13) % ?),
                   (?::VARCHAR[])[CAST(1 + hash(i * 5) % 8 AS BIGINT)],
                   CASE WHEN i % 10 = 0 THEN 'nccl' ELSE 'kernel' END,
                   CASE WHEN i % 10 = 0 THEN 'nccl_error' ELSE 'xid' END,
                   CASE WHEN i % 10 = 0 THEN NULL
                        ELSE [13, 31, 43, 63, 92, 79, 48][CAST(1 + i % 7 AS BIGINT)] END,
                   'warning', printf('kern-%03d.log', i % ?), i // ? + 1
            FROM range(?) r(i) ORDER BY i
            """,
            [T0, float(span_s), float(n_events), NODES, PCI, NODES, NODES, n_events],
        )
        # what ``load()`` keeps beside the rows it writes: the summary of each file's events
        store.execute("DELETE FROM event_summary")
        store.execute(f"INSERT INTO event_summary SELECT * FROM {SUMMARY_FROM_TABLES}")
        store.execute("CHECKPOINT")
    return T0 + timedelta(days=days)


def write_log(path: Path, start: datetime, n: int) -> None:
    """``n`` syslog Xid lines of node gpu001 from ``start``."""
    with path.open("a") as f:
        for k in range(n):
            ts = start + timedelta(minutes=k)
            f.write(
                f"{ts:%Y-%m-%dT%H:%M:%S}+00:00 gpu001 kernel: NVRM: Xid (PCI:0000:3b:00): 79, "
                "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
            )


def faultlens(*args: str) -> tuple[float, str]:
    """Wall time and stdout of one command; its CPU time (user + system) in ``LAST_CPU_S``."""
    global LAST_CPU_S
    t, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [sys.executable, "-m", "faultlens.app.cli", *args], capture_output=True, text=True
    )
    elapsed = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    LAST_CPU_S = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode not in (0, 4):
        raise SystemExit(f"faultlens {' '.join(args)} failed ({done.returncode}): {done.stderr}")
    return elapsed, done.stdout


def stages(db: Path, models: Path, as_of: datetime) -> dict[str, float]:
    """In process: the prediction's parts, each timed on its own."""
    from faultlens.ingest.store import Store
    from faultlens.ingest.watermarks import data_mark
    from faultlens.models.explain import alert_context
    from faultlens.models.features import point_features
    from faultlens.models.freshness import default_as_of, source_last_seen
    from faultlens.models.registry import load_model

    load_model(models)
    out: dict[str, float] = {}
    with Store(db, read_only=True) as store:
        for name, fn in (
            ("source_last_seen_s", lambda: source_last_seen(store)),
            ("default_as_of_s", lambda: default_as_of(store)),
            ("data_mark_s", lambda: data_mark(store)),
            ("point_features_s", lambda: point_features(store, as_of)),
            (
                "alert_context_s",
                lambda: alert_context(store, [f"gpu{i:03d}" for i in range(NODES)], as_of),
            ),
        ):
            t = time.perf_counter()
            fn()
            out[name] = time.perf_counter() - t
    return out


def prepare(folder: Path, n_events: int, models: Path, reuse: bool = False) -> dict[str, float]:
    """The database of ``n_events`` in ``folder`` with its config (``reuse``: one built by an
    earlier run with ``--keep`` is used as it is)."""
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / "f.duckdb"
    row: dict[str, float] = {"events": n_events, "days": days_for(n_events)}
    end = T0 + timedelta(days=days_for(n_events))
    log = folder / "kern.log"
    config = folder / "faultlens.toml"
    config.write_text(
        f'[faultlens]\ndb = "{db}"\nmodels_dir = "{models}"\n[ingest]\npaths = ["{log}"]\n'
    )
    if reuse and db.exists() and (folder / "built").exists():
        row["build_s"] = float((folder / "built").read_text())
        return row
    db.unlink(missing_ok=True)
    # The configured log is ingested first, into the empty database (its refresh is then cheap),
    # and the history appended after: a run then finds the log unchanged, as a scheduled run
    # does between two appends.
    log.unlink(missing_ok=True)
    write_log(log, end - timedelta(hours=1), 5)
    faultlens("ingest", str(log), "--db", str(db), "--quiet")
    t = time.perf_counter()
    build(db, n_events, fresh=False)
    row["build_s"] = time.perf_counter() - t
    (folder / "built").write_text(f"{row['build_s']:.1f}")
    return row


def measure(folder: Path, n_events: int, models: Path, reuse: bool = False) -> dict[str, float]:
    row = prepare(folder, n_events, models, reuse)
    db, config = folder / "f.duckdb", folder / "faultlens.toml"
    end = T0 + timedelta(days=days_for(n_events))
    as_of = ["--as-of", end.isoformat()]
    row["load_before"] = os.getloadavg()[0]
    forget_run(db)  # a database kept from an earlier bench run: its first run scores again
    # the first run scores and saves its prediction; the next ones are the scheduled job's
    # steady state (nothing new: the prediction reused)
    row["run_first_s"] = faultlens("run", "--config", str(config), *as_of)[0]
    reused = []
    for _ in range(3):
        wall, out = faultlens("run", "--config", str(config), *as_of)
        if not json.loads(out.splitlines()[-1])["reused"]:
            raise SystemExit("a run with nothing new did not reuse the prediction")
        reused.append((wall, LAST_CPU_S))
    row["run_nothing_new_s"], row["run_nothing_new_cpu_s"] = min(reused)
    # the baseline at the same size: the same run scoring again (what every run did before)
    rescored = []
    for _ in range(3):
        forget_run(db)
        rescored.append((faultlens("run", "--config", str(config), *as_of)[0], LAST_CPU_S))
    row["run_rescored_s"], row["run_rescored_cpu_s"] = min(rescored)
    row["load_after"] = os.getloadavg()[0]
    code = (
        "import json, sys; from pathlib import Path; from datetime import datetime; "
        "from bench.bench_run_history import stages; "
        "print(json.dumps(stages(Path(sys.argv[1]), Path(sys.argv[2]), "
        "datetime.fromisoformat(sys.argv[3]))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(db), str(models), end.isoformat()],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    row.update(json.loads(done.stdout.strip().splitlines()[-1]))
    return row


def forget_run(db: Path) -> None:
    """Drop the saved prediction, so that the next run scores (the baseline)."""
    import duckdb

    con = duckdb.connect(str(db))
    try:
        if con.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'run_cache'"
        ).fetchone()[0]:
            con.execute("DELETE FROM run_cache")
    finally:
        con.close()


def train_model(folder: Path) -> Path:
    """One model for every database, trained on a sparse 60-day history (the benchmark's own
    rate has a critical Xid on every node every hour: one class, nothing to learn)."""
    folder.mkdir(parents=True, exist_ok=True)
    db, models = folder / "f.duckdb", folder / "models"
    end = build(db, 8_000, days=60)
    faultlens("train", "--db", str(db), "--as-of", end.isoformat(), "--models-dir", str(models))
    return models


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="500000,5000000,50000000")
    ap.add_argument("--keep", type=Path, help="keep the databases in this folder")
    ap.add_argument(
        "--reuse", action="store_true", help="with --keep: use the databases already built there"
    )
    ap.add_argument("--build-only", action="store_true", help="with --keep: only build them")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    base = args.keep or Path(tempfile.mkdtemp(prefix="faultlens-bench-run-"))
    rows = []
    try:
        models = base / "model" / "models"
        if not (args.reuse and models.exists()):
            models = train_model(base / "model")
        for n in sizes:
            if args.build_only:
                print(json.dumps(prepare(base / f"e{n}", n, models, args.reuse)), file=sys.stderr)
                continue
            rows.append(measure(base / f"e{n}", n, models, args.reuse))
            if args.keep is None:
                shutil.rmtree(base / f"e{n}", ignore_errors=True)
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)
    if args.build_only:
        return 0
    print(table(rows))
    OUT.mkdir(exist_ok=True)
    (OUT / "bench_run_history.md").write_text(table(rows) + "\n")
    (OUT / "bench_run_history.json").write_text(json.dumps(rows, indent=1))
    return 0


def table(rows: list[dict]) -> str:
    small = rows[0]
    keys = (
        "source_last_seen_s",
        "default_as_of_s",
        "data_mark_s",
        "point_features_s",
        "alert_context_s",
    )
    lines = [
        "| events | days | first `run` s | `run`, nothing new (reused), s | over the smallest | "
        "`run` scoring again (baseline), s | reused / scoring again | CPU s reused / scoring "
        "again | "
        + " | ".join(k.removesuffix("_s") + " s" for k in keys)
        + " | load 1m before / after |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|" + "---:|" * len(keys) + "---|",
    ]
    for r in rows:
        ratio = r["run_nothing_new_s"] / small["run_nothing_new_s"]
        lines.append(
            f"| {r['events']:,} | {r['days']:,} | {r['run_first_s']:.2f} | "
            f"{r['run_nothing_new_s']:.2f} | {ratio:.2f} | {r['run_rescored_s']:.2f} | "
            f"{r['run_nothing_new_s'] / r['run_rescored_s']:.2f} | "
            f"{r.get('run_nothing_new_cpu_s', float('nan')):.2f} / "
            f"{r.get('run_rescored_cpu_s', float('nan')):.2f} | "
            + " | ".join(f"{r[k]:.2f}" for k in keys)
            + f" | {r['load_before']:.1f} / {r['load_after']:.1f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

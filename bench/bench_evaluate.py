"""Evaluation of the failure predictor over many synthetic clusters, one seed each.

Each seed goes the real path (``faultlens synth`` -> ``ingest`` -> ``refresh`` -> ``train`` with
its defaults) on a 256-node x 120-day cluster at Meta RSC-1's failure rate (the acceptance test's
cluster: ``tests/models/test_acceptance.py``), and the test window (last quarter) of every seed is
scored for the model and both baselines. The report gives, per scorer, the mean and 95% Student-t
interval over seeds of PR-AUC, precision, recall and median lead time, and the pooled precision /
recall (alerts and failure episodes summed over seeds), beside the ceiling: the share of the test
window's failure episodes that left any warning in the logs (ground truth ``has_precursors``).

Seeds are in fixed lists. ``DEV_SEEDS`` are the ones development may look at as often as it
likes (31337 is one: it was the acceptance seed, and its recall was raised from 0.34 to 0.55 by
changing the threshold rule and features while looking at it, so it is spent; 101, 202 and 303
were added as development seeds when the threshold rule's fallback was changed). ``EVAL_SEEDS``
were drawn once (``numpy.random.default_rng(20261213).integers(100_000, 1_000_000, 10)``) and
are run once, at the end of a piece of work; nothing may be chosen by looking at their figures,
and a change made after looking at them retires them (draw a new list and say so in README).
``RETIRED_SEEDS`` are the earlier evaluation lists, development data now: the first
(``default_rng(20261201)``, same call) was looked at before the threshold rule changed, the
second (``default_rng(20261202)``) before this bench's ingest got the demo's node pattern
(``_build``), which changes what every seed's model sees; the third (``default_rng(20261203)``)
before the operating precision target went from 0.9 to 0.85 (chosen on the development seeds);
the fourth (``default_rng(20261204)``) before the trees' L2 regularization changed (chosen on
the development seeds and the first six of the third list); the fifth (``default_rng(20261205)``)
before the trees were refitted on the training and calibration windows (``TrainConfig.refit``,
chosen on the same twelve development clusters); the sixth (``default_rng(20261206)``) before
the calibrator and the thresholds were fitted on cross-fitted scores (``TrainConfig.
cross_fit_folds``) and the threshold's floor went to 0.35, chosen on 22 development clusters:
those twelve and the sixth list itself; the seventh (``default_rng(20261207)``) before the
operating precision target went from 0.85 to 0.80 (chosen on the same twelve development
clusters); the eighth (``default_rng(20261208)``) before an alert was held open down to the
watch level (``TrainConfig.clear_fraction``, chosen on the same twelve development clusters); the
ninth (``default_rng(20261209)``) before the hold went down to 0.3 of the threshold and the
threshold's floor to 0.25 (chosen on the same twelve development clusters at the default warning
share and at share 0.3); the tenth (``default_rng(20261210)``, run once on that change) before
the floor went back to 0.35, the hold staying at 0.3; the eleventh (``default_rng(20261211)``)
before the floor was lowered where the model sees few failures coming
(``TrainConfig.low_share_floor``, chosen on the same twelve development clusters at both warning
shares); the twelfth (``default_rng(20261212)``) before the failure model got the warning span
(``warn_span``: the hours one GPU has kept warning, chosen on the same twelve development clusters
at both warning shares).

    python -m bench.bench_evaluate --seeds dev [--jobs 2] [--warning-share 0.3]
    python -m bench.bench_evaluate --seeds eval --jobs 2      # once; quote it in README

Each seed runs in its own process (``--jobs`` at a time); results go to
``bench/out/bench_evaluate-<seeds>[-share<S>].json`` and ``.md``.
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
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"
DEV_SEEDS = (31337, 90210, 4242, 101, 202, 303)
EVAL_SEEDS = (153838, 811809, 379021, 106498, 629069, 386139, 738886, 870479, 396751, 477186)
RETIRED_SEEDS = (
    *(484559, 699979, 307648, 150561, 586564, 449699, 400249, 417984, 850421, 660776),  # 20261201
    *(214182, 440142, 742880, 243683, 921689, 168795, 558772, 834006, 246208, 431751),  # 20261202
    *(975091, 854019, 800947, 640311, 671599, 267698, 508494, 425639, 313158, 580376),  # 20261203
    *(375932, 421224, 507684, 875798, 866276, 279303, 822044, 290466, 193984, 406612),  # 20261204
    *(990304, 387515, 855906, 457477, 528599, 500427, 296747, 343907, 257421, 968440),  # 20261205
    *(806101, 866947, 442067, 332459, 279082, 834496, 141599, 235329, 305577, 345772),  # 20261206
    *(410362, 888132, 345961, 593633, 617623, 417881, 670528, 339856, 107200, 515726),  # 20261207
    *(466917, 924692, 898984, 509049, 451855, 373601, 681137, 710430, 235998, 225647),  # 20261208
    *(115585, 774120, 213797, 335035, 768150, 415508, 831330, 271863, 868307, 415558),  # 20261209
    *(484936, 115656, 145034, 239999, 693771, 916283, 189367, 764342, 751462, 275332),  # 20261210
    *(205826, 374802, 965915, 350128, 939049, 871476, 946143, 887317, 349040, 147824),  # 20261211
    *(230403, 393605, 815285, 673871, 185901, 495626, 547446, 799099, 373675, 785989),  # 20261212
)
# TrainConfig fields a development sweep may set from the command line (the evaluation runs
# with the defaults: a value chosen on the development seeds becomes the default first).
# ``--cross-fit-folds 0``: the time split (the default before the seventh list), with ``--refit
# 0`` the trees fitted on the training window alone (the default before the sixth list).
TRAIN_KNOBS = (
    "target_precision",
    "min_threshold",
    "max_threshold",
    "min_alerts",
    "refit",
    "cross_fit_folds",
    "clear_fraction",
    "low_share_floor",
)
SCORERS = ("model", "rule_baseline", "lemon_baseline")
NOT_LOGS = {"topology.csv", "ground_truth.json"}


def cluster_config(seed: int, warning_share: float | None, nodes: int, days: float):
    from faultlens.synth.config import META_RSC1_FAILURES_PER_1000_NODE_DAYS, SynthConfig

    return SynthConfig(
        n_nodes=nodes,
        days=days,
        seed=seed,
        failures_per_1000_node_days=META_RSC1_FAILURES_PER_1000_NODE_DAYS,
        telemetry_interval_min=120.0,
        noise_lines_per_node_day=6.0,
        write_job_logs=False,
        write_training=False,
        warning_share=warning_share,
    )


def ceiling(episodes, truth_failures: list[dict], tolerance_h: float = 1.0) -> dict:
    """Share of failure episodes that left any warning: each episode is matched to the ground
    truth failure of the same node nearest in time (within ``tolerance_h``)."""
    import polars as pl

    truth = pl.DataFrame(
        {
            "node": [f["node"] for f in truth_failures],
            "tts": [datetime.fromisoformat(f["ts"]) for f in truth_failures],
            "warned": [bool(f["has_precursors"]) for f in truth_failures],
        }
    ).with_columns(pl.col("tts").cast(pl.Datetime("us")))
    ep = episodes.select("node", pl.col("ts").cast(pl.Datetime("us"))).sort("ts")
    matched = ep.join_asof(
        truth.sort("tts"),
        left_on="ts",
        right_on="tts",
        by="node",
        strategy="nearest",
        tolerance=timedelta(hours=tolerance_h),
        check_sortedness=False,
    )
    warned = int(matched["warned"].fill_null(False).sum())
    return {
        "episodes": ep.height,
        "warned": warned,
        "unmatched": int(matched["tts"].is_null().sum()),
        "ceiling": round(warned / ep.height, 4) if ep.height else None,
    }


def _build(seed: int, warning_share: float | None, nodes: int, days: float, folder: Path):
    """synth -> ingest -> refresh into ``folder/db.duckdb``; returns (truth, failed files).
    Ingest gets the demo's node pattern (``nodes/<node>/kern.log``), as ``faultlens demo`` and
    the acceptance test do: the cluster's ``dmesg -T`` kernel logs name no host (about a quarter
    of the nodes), and without it their lines have no node and no feature sees them."""
    from faultlens.app.demo import synth_context
    from faultlens.ingest.attribution import refresh
    from faultlens.ingest.catalog import load_catalog
    from faultlens.ingest.pipeline import ingest_paths
    from faultlens.ingest.store import Store
    from faultlens.synth.generate import generate

    result = generate(cluster_config(seed, warning_share, nodes, days), folder / "synth")
    with Store(folder / "db.duckdb") as store:
        store.load_xid_catalog(load_catalog(None))
        logs = [str(p) for p in result.files if p.name not in NOT_LOGS]
        report = ingest_paths(store, logs, now=datetime(2030, 1, 1), base_ctx=synth_context())
        refresh(store)
    shutil.rmtree(folder / "synth", ignore_errors=True)
    return result.truth, report.totals["failed"]


def run_seed(
    seed: int,
    warning_share: float | None,
    nodes: int,
    days: float,
    cache: Path | None = None,
    train: dict | None = None,
) -> dict:
    """One seed end to end. With ``cache`` the ingested database and ground truth of this
    (seed, share, nodes, days) are kept there and reused, so a model change re-runs ``train``
    only (synth and ingest do not depend on the model); the final evaluation runs without it.
    ``train``: TrainConfig fields other than the defaults (development sweeps only)."""
    from faultlens.ingest.store import Store
    from faultlens.models.predictor import TrainConfig, train_failure_model
    from faultlens.models.target import failure_episodes

    t0 = time.perf_counter()
    share = "default" if warning_share is None else f"{warning_share:g}"
    if cache is not None:
        folder = cache / f"seed{seed}-share{share}-{nodes}x{days:g}-v2"  # v2: node pattern
    else:
        folder = Path(tempfile.mkdtemp(prefix=f"faultlens-eval-{seed}-"))
    truth_file = folder / "truth.json"
    try:
        if truth_file.exists():
            truth, failed = json.loads(truth_file.read_text()), 0
        else:
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            truth, failed = _build(seed, warning_share, nodes, days, folder)
            truth_file.write_text(json.dumps(truth, default=str))
        t_build = time.perf_counter() - t0
        with Store(folder / "db.duckdb", read_only=True) as store:
            end = datetime.fromisoformat(truth["summary"]["window"][1])
            whole = {"refit": bool, "cross_fit_folds": int}
            given = {k: whole.get(k, lambda x: x)(v) for k, v in (train or {}).items()}
            trained = train_failure_model(store, as_of=end, cfg=TrainConfig(**given))
            lo, hi = trained.split.test
            ceil = ceiling(failure_episodes(store, lo, hi), truth["failures"])
    finally:
        if cache is None:
            shutil.rmtree(folder, ignore_errors=True)
    return {
        "seed": seed,
        "warning_share": warning_share,
        "failed_files": failed,
        "metrics": trained.metrics,
        "floor": trained.card["calibration"].get("floor"),
        "ceiling": ceil,
        "build_seconds": round(t_build, 1),
        "seconds": round(time.perf_counter() - t0, 1),
    }


def _child(seed: int, args: argparse.Namespace) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "bench.bench_evaluate",
        "--one",
        str(seed),
        "--nodes",
        str(args.nodes),
        "--days",
        str(args.days),
    ]
    if args.warning_share is not None:
        cmd += ["--warning-share", str(args.warning_share)]
    if args.cache is not None:
        cmd += ["--cache", str(args.cache)]
    for name, value in knobs(args).items():
        cmd += [
            f"--{name.replace('_', '-')}",
            json.dumps(value) if name == "params" else str(value),
        ]
    done = subprocess.run(cmd, check=True, capture_output=True, text=True)
    row = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"seed {seed}: {row['seconds']} s", file=sys.stderr, flush=True)
    return row


def knobs(args: argparse.Namespace) -> dict:
    """The TRAIN_KNOBS given on the command line, and ``--params`` (LightGBM / estimator
    parameters, JSON) as TrainConfig's ``params``."""
    given = {n: getattr(args, n) for n in TRAIN_KNOBS if getattr(args, n) is not None}
    if args.params:
        given["params"] = json.loads(args.params)
    return given


def summarize(rows: list[dict]) -> dict:
    from faultlens.models.evaluate import summarize_seeds

    eps = sum(r["ceiling"]["episodes"] for r in rows)
    warned = sum(r["ceiling"]["warned"] for r in rows)
    return {
        "scorers": summarize_seeds([r["metrics"] for r in rows]),
        "ceiling_pooled": round(warned / eps, 4) if eps else None,
        "test_failure_episodes": eps,
    }


def _ci(m: dict) -> str:
    if m["mean"] is None:
        return "-"
    if m["lo"] is None:
        return f"{m['mean']:.3g}"
    return f"{m['mean']:.3g} [{m['lo']:.3g}, {m['hi']:.3g}]"


def markdown(doc: dict) -> str:
    s = doc["summary"]
    lines = [
        f"{doc['seed_list']} seeds {', '.join(str(r['seed']) for r in doc['seeds'])}: "
        f"{doc['nodes']} nodes x {doc['days']:g} days each, warning share "
        f"{doc['warning_share'] if doc['warning_share'] is not None else 'default'}; "
        f"{s['test_failure_episodes']} test-window failure episodes pooled, ceiling "
        f"{s['ceiling_pooled']}; {doc['wall_s']} s wall, load {doc['load_avg_1m']:.1f}, "
        f"commit {doc.get('commit') or '?'}"
        + (f", TrainConfig {doc['train_knobs']}." if doc.get("train_knobs") else "."),
        "",
        "| scorer | PR-AUC | precision | recall | median lead h | pooled precision | "
        "pooled recall |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, m in s["scorers"].items():
        p = m["pooled"]
        lines.append(
            f"| {name} | {_ci(m['pr_auc'])} | {_ci(m['precision'])} | {_ci(m['recall'])} | "
            f"{_ci(m['median_lead_time_h'])} | {p['precision']} ({p['true_alerts']}/"
            f"{p['alerts']}) | {p['recall']} ({p['caught']}/{p['failure_episodes']}) |"
        )
    floors = [r.get("floor") or {} for r in doc["seeds"]]
    lines += [
        "",
        "Per seed, the operating threshold's floor (the share of the fitting window's failures "
        "the out-of-fold scores saw coming): "
        + "; ".join(
            f"{r['seed']}: {f.get('floor')} ({f.get('seen_share')})"
            for r, f in zip(doc["seeds"], floors, strict=True)
        )
        + ".",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="dev", help="dev, eval, retired, or a comma list")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--nodes", type=int, default=256)
    ap.add_argument("--days", type=float, default=120.0)
    ap.add_argument("--warning-share", type=float, default=None)
    ap.add_argument(
        "--cache", type=Path, default=None, help="keep / reuse ingested databases here (dev runs)"
    )
    for name in TRAIN_KNOBS:
        ap.add_argument(f"--{name.replace('_', '-')}", type=float, default=None, help="dev sweeps")
    ap.add_argument(
        "--params",
        default=None,
        help="estimator parameters, JSON (dev sweeps): '{\"num_leaves\": 31}'",
    )
    ap.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one is not None:
        row = run_seed(args.one, args.warning_share, args.nodes, args.days, args.cache, knobs(args))
        print(json.dumps(row, default=str), flush=True)
        return
    named = {"dev": DEV_SEEDS, "eval": EVAL_SEEDS, "retired": RETIRED_SEEDS}
    seeds = named.get(args.seeds) or tuple(int(s) for s in args.seeds.split(","))
    given = knobs(args)
    if given and args.seeds == "eval":
        raise SystemExit("the evaluation seeds run with TrainConfig's defaults only")
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        rows = list(pool.map(lambda s: _child(s, args), seeds))
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    doc = {
        "commit": commit,
        "seed_list": args.seeds,
        "nodes": args.nodes,
        "days": args.days,
        "warning_share": args.warning_share,
        "cached": args.cache is not None,
        "train_knobs": given,
        "wall_s": round(time.perf_counter() - t0, 1),
        "load_avg_1m": os.getloadavg()[0],
        "seeds": rows,
        "summary": summarize(rows),
    }
    OUT.mkdir(exist_ok=True)
    tag = args.seeds if args.seeds in named else "custom"
    if args.warning_share is not None:
        tag += f"-share{args.warning_share:g}"
    tag += "".join(f"-{n}{v:g}" for n, v in given.items() if n != "params")
    if "params" in given:
        tag += "-" + "-".join(f"{k}{v}" for k, v in sorted(given["params"].items()))
    (OUT / f"bench_evaluate-{tag}.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
    (OUT / f"bench_evaluate-{tag}.md").write_text(markdown(doc))
    print(markdown(doc), end="")


if __name__ == "__main__":
    main()

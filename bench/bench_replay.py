"""Replay-engine benchmark: a year of interruptions of a 100,000-GPU fleet (the Llama 3 rate
scaled), 7 strategies x 20 checkpoint intervals x 100 bootstrap resamples, against a
straightforward SimPy discrete-event simulation of the same model (``replay.des``).

Target: <= 10 s for the vectorized engine on a 2-core machine, >= 100x faster than the DES. The
DES is timed on one replay per strategy (the full grid would take hours) and extrapolated per
replay; both must give the same numbers on those replays.

Run: python -m bench.bench_replay [--resamples N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

from faultlens.replay.des import simulate
from faultlens.replay.generate import llama3_trace
from faultlens.replay.model import JobSpec
from faultlens.replay.score import evaluate, replay
from faultlens.replay.strategies import STRATEGIES, resolve

FLEET_GPUS = 100_000
INTERVALS_MIN = np.linspace(5, 240, 20)


def run(resamples: int = 100, seed: int = 0) -> dict:
    trace = llama3_trace(FLEET_GPUS, 365.0, seed=seed, predicted_frac=0.5, false_alarms_per_day=5.0)
    job = JobSpec(repair_h=24.0)
    names = list(STRATEGIES)
    load = os.getloadavg()[0]
    t0, c0 = time.perf_counter(), time.process_time()
    scores = replay(
        trace, names, job, sweep=("interval_min", INTERVALS_MIN), resamples=resamples, seed=seed
    )
    engine_s = time.perf_counter() - t0
    engine_cpu_s = time.process_time() - c0
    replays = len(names) * len(INTERVALS_MIN) * (resamples + 1)
    des_s, worst = 0.0, 0.0
    for name in names:
        s = resolve(name)
        t1 = time.perf_counter()
        slow = simulate(s, trace, job)
        des_s += time.perf_counter() - t1
        fast = evaluate(s, trace, job)
        worst = max(worst, max(abs(fast[k] - slow[k]) for k in fast))
    des_per_replay = des_s / len(names)
    best = max(scores, key=lambda x: x.ettr)
    return {
        "events": trace.n_events,
        "replays": replays,
        "engine_s": round(engine_s, 3),
        "engine_cpu_s": round(engine_cpu_s, 3),
        "engine_ms_per_replay": round(1e3 * engine_s / replays, 4),
        "engine_cpu_ms_per_replay": round(1e3 * engine_cpu_s / replays, 4),
        "load_avg_1m": round(load, 2),
        "des_s_per_replay": round(des_per_replay, 3),
        "des_extrapolated_s": round(des_per_replay * replays, 1),
        "speedup": round(des_per_replay * replays / engine_s, 1),
        "max_abs_diff_h": worst,
        "best": {"name": best.name, "params": best.params["sweep"], "ettr": round(best.ettr, 4)},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--resamples", type=int, default=100)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    res = run(args.resamples)
    if args.json:
        print(json.dumps(res))
    else:
        for k, v in res.items():
            print(f"{k:>24}: {v}")
    ok = res["engine_s"] <= 10.0 and res["speedup"] >= 100 and res["max_abs_diff_h"] < 1e-6
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""Thin a cosmic-ray session to a seeded sample, and summarize a finished one.

cosmic-ray makes every operator's variant at every site (about 1,800 mutants for replay/engine.py),
too many to run on two cores. ``sample`` keeps one mutant per source site (a random operator
among those that apply there, like mutmut's one-per-site) and then at most ``--sites`` sites; the
others are marked skipped, as cosmic-ray's own filters do. ``summary`` prints killed / survived.

Usage:
    python -m bench.mutation.sample sample SESSION.sqlite --sites 80 --seed 0
    python -m bench.mutation.sample summary SESSION.sqlite [...]
"""

from __future__ import annotations

import argparse
import random
import sqlite3
from collections import defaultdict


def sample(session: str, sites: int, seed: int) -> tuple[int, int]:
    """Mark all but one mutant per site, and all but ``sites`` sites, as skipped."""
    rng = random.Random(seed)
    con = sqlite3.connect(session)
    by_site: dict[tuple[int, int], list[str]] = defaultdict(list)
    # job ids are random per `cosmic-ray init`: order by what the mutant is, so a seed repeats
    rows = con.execute(
        "SELECT job_id, start_pos_row, start_pos_col FROM mutation_specs "
        "WHERE job_id NOT IN (SELECT job_id FROM work_results) "
        "ORDER BY start_pos_row, start_pos_col, operator_name, operator_args, occurrence"
    )
    for job_id, row, col in rows:
        by_site[(row, col)].append(job_id)
    chosen_sites = sorted(by_site)
    if len(chosen_sites) > sites:
        chosen_sites = sorted(rng.sample(chosen_sites, sites))
    keep = {rng.choice(by_site[s]) for s in chosen_sites}
    skip = [j for jobs in by_site.values() for j in jobs if j not in keep]
    con.executemany(
        "INSERT INTO work_results (worker_outcome, output, test_outcome, diff, job_id) "
        "VALUES ('SKIPPED', 'not in the sample', NULL, '', ?)",
        [(j,) for j in skip],
    )
    con.commit()
    return len(keep), len(by_site)


def summary(session: str) -> dict[str, int]:
    con = sqlite3.connect(session)
    counts = dict(
        con.execute(
            "SELECT lower(coalesce(test_outcome, worker_outcome)), count(*) FROM work_results "
            "WHERE lower(worker_outcome) != 'skipped' GROUP BY 1"
        ).fetchall()
    )
    counts["pending"] = con.execute(
        "SELECT count(*) FROM work_items WHERE job_id NOT IN (SELECT job_id FROM work_results)"
    ).fetchone()[0]
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sample")
    s.add_argument("session")
    s.add_argument("--sites", type=int, default=80)
    s.add_argument("--seed", type=int, default=0)
    m = sub.add_parser("summary")
    m.add_argument("sessions", nargs="+")
    args = ap.parse_args()
    if args.cmd == "sample":
        kept, total = sample(args.session, args.sites, args.seed)
        print(f"{args.session}: {kept} mutants kept, one at each of {kept} of {total} sites")
        return
    for session in args.sessions:
        c = summary(session)
        killed, survived = c.get("killed", 0), c.get("survived", 0)
        score = killed / (killed + survived) if killed + survived else float("nan")
        print(f"{session}: killed {killed}, survived {survived}, other {c}; score {score:.1%}")


if __name__ == "__main__":
    main()

"""The demo pipeline: generate a synthetic cluster, ingest it, and run every stage over it.

``run_demo`` writes the synthetic cluster's raw logs (``synth.generate``), rebuilds the database
from them (``ingest.pipeline.ingest_paths``), then calls each function of ``STAGES`` in order with
``(store, truth, console)``. Later parts of faultlens (attribution taxonomy, training, stragglers,
replay, report) append their own stage to ``STAGES``; a stage prints to ``console`` (stdout) and
must not assume that another stage ran.

Re-running: the demo database is rebuilt from scratch each time (the file is deleted first), but
only if it is absent or holds nothing except files from a demo output folder; a database with other
ingested files is left alone and the demo stops with a usage error (pass another ``--db``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from faultlens.app.common import Table, open_store
from faultlens.ingest.base import ParseContext
from faultlens.ingest.catalog import load_catalog
from faultlens.ingest.errors import ConfigError
from faultlens.ingest.pipeline import IngestReport, ingest_paths
from faultlens.ingest.store import Store
from faultlens.synth import SynthConfig, generate

# The synthetic cluster writes each node's kernel log to nodes/<node>/kern.log (its dmesg -T
# logs name no host, as real ones do): the layout is the evidence, passed as a path pattern.
SYNTH_NODE_PATTERN = r"/nodes/(?P<node>[^/]+)/[^/]+$"


def synth_context() -> ParseContext:
    """The ingest context for a synthetic cluster's output folder."""
    return ParseContext(file="", node_pattern=SYNTH_NODE_PATTERN)


log = logging.getLogger(__name__)

Stage = Callable[[Store, dict[str, Any], Console], None]

DEMO_MARKER = "ground_truth.json"  # a folder holding this file is a synth output folder
NOT_LOGS = frozenset({"topology.csv", DEMO_MARKER})  # synth outputs that are not logs to ingest


@dataclass
class DemoResult:
    out: Path
    db: Path
    truth: dict[str, Any]
    ingest: IngestReport
    summary: dict[str, Any]


# -- the summary stage -----------------------------------------------------------------------------


def summary_doc(store: Store, truth: dict[str, Any]) -> dict[str, Any]:
    """The numbers the demo prints: what the database holds next to what really happened."""
    s = truth["summary"]
    by_kind = store.query(
        "SELECT source, kind, count(*) AS n FROM events GROUP BY ALL ORDER BY n DESC, source, kind"
    ).to_dicts()
    top_xids = store.query(
        "SELECT e.code AS xid, any_value(c.name) AS name, count(*) AS n, "
        "count(DISTINCT e.node) AS nodes FROM events e LEFT JOIN xid_catalog c ON c.xid = e.code "
        "WHERE e.kind IN ('xid', 'nvlink', 'fallen_off_bus', 'gsp_timeout', 'ecc', 'row_remap') "
        "AND e.code IS NOT NULL GROUP BY e.code ORDER BY n DESC, xid LIMIT 10"
    ).to_dicts()
    hw_nodes = store.query(
        "SELECT node, count(*) AS n, count(DISTINCT kind) AS kinds FROM events "
        "WHERE source = 'kernel' AND severity IN ('error', 'critical') AND node IS NOT NULL "
        "GROUP BY node ORDER BY n DESC, node LIMIT 10"
    ).to_dicts()
    lemons = set(truth.get("lemon_nodes", []))
    for r in hw_nodes:
        r["lemon"] = r["node"] in lemons
    jobs = store.query(
        "SELECT CASE WHEN state LIKE 'CANCELLED%' THEN 'CANCELLED' ELSE state END AS state, "
        "count(DISTINCT job_id) AS jobs, count(*) AS records FROM jobs GROUP BY 1 "
        "ORDER BY records DESC, state"
    ).to_dicts()
    interrupted = {r["job_id"] for r in truth["interruptions"]}
    killed_in_db = (
        store.scalar(
            "SELECT count(*) FROM jobs WHERE state IN ('NODE_FAIL', 'FAILED') AND job_id IN "
            "(SELECT unnest(?::VARCHAR[]))",
            [sorted(interrupted)],
        )
        if interrupted
        else 0
    )
    signals = store.scalar(
        "SELECT count(DISTINCT (node, date_trunc('hour', ts))) FROM events WHERE source = 'kernel' "
        "AND severity IN ('error', 'critical') AND node IS NOT NULL AND ts IS NOT NULL"
    )
    return {
        "failure_signal_node_hours": signals,
        "failure_signals_per_1000_node_days": round(signals / s["node_days"] * 1000, 2),
        "events_by_kind": by_kind,
        "top_xids": top_xids,
        "nodes_most_hw_errors": hw_nodes,
        "jobs_by_state": jobs,
        "truth": {
            "failures": s["n_failures"],
            "failures_per_1000_node_days": s["failures_per_1000_node_days"],
            "node_days": s["node_days"],
            "interruptions": s["n_interruptions"],
            "lemon_nodes": sorted(lemons),
        },
        "interruptions_found_in_db": killed_in_db,
    }


def stage_summary(store: Store, truth: dict[str, Any], console: Console) -> None:
    """Events by kind, top Xids, nodes with most hardware errors, jobs by state, failure rate."""
    doc = summary_doc(store, truth)
    t = Table("source", "kind", "events", title="events by kind")
    for r in doc["events_by_kind"]:
        t.add_row(r["source"], r["kind"], f"{r['n']:,}")
    console.print(t)
    t = Table("xid", "name", "events", "nodes", title="top Xids")
    for r in doc["top_xids"]:
        t.add_row(str(r["xid"]), (r["name"] or "")[:48], f"{r['n']:,}", str(r["nodes"]))
    console.print(t)
    t = Table(
        "node", "error events", "kinds", "lemon (truth)", title="nodes with most hardware errors"
    )
    for r in doc["nodes_most_hw_errors"]:
        t.add_row(r["node"], f"{r['n']:,}", str(r["kinds"]), "yes" if r["lemon"] else "")
    console.print(t)
    t = Table("state", "jobs", "records", title="jobs by state")
    for r in doc["jobs_by_state"]:
        t.add_row(r["state"], f"{r['jobs']:,}", f"{r['records']:,}")
    console.print(t)
    tr = doc["truth"]
    console.print(
        f"failure signals in the logs: {doc['failure_signal_node_hours']} node-hours with "
        f"error/critical kernel events = {doc['failure_signals_per_1000_node_days']:.2f} per 1000 "
        "node-days (includes non-fatal warnings and follow-up errors)",
        highlight=False,
    )
    console.print(
        f"ground truth: {tr['failures']} failures over {tr['node_days']:,.0f} node-days = "
        f"{tr['failures_per_1000_node_days']:.2f} failures per 1000 node-days "
        f"(Llama 3: 3.79, Meta RSC-1: 6.50); {tr['interruptions']} job interruptions, "
        f"{doc['interruptions_found_in_db']} of them found as NODE_FAIL/FAILED jobs in the "
        f"database; lemon nodes: {', '.join(tr['lemon_nodes']) or 'none'}",
        highlight=False,
    )


def _stages() -> list[Stage]:
    from faultlens.app.demo_stages import (
        stage_attribution,
        stage_fabric,
        stage_models,
        stage_report,
        stage_stragglers,
    )
    from faultlens.app.replay_view import stage_replay

    return [
        stage_summary,
        stage_attribution,
        stage_fabric,
        stage_models,
        stage_stragglers,
        stage_replay,
        stage_report,
    ]


STAGES: list[Stage] = _stages()


# -- the pipeline ----------------------------------------------------------------------------------


def _reset_db(db: Path, out: Path) -> None:
    """Delete the demo database so it is rebuilt, unless it holds files from elsewhere."""
    if not db.exists():
        return
    with open_store(db, read_only=True) as store:
        paths = [r["path"] for r in store.query("SELECT path FROM ingested_files").to_dicts()]
    foreign = [p for p in paths if not _in_demo_folder(Path(p))]
    if foreign:
        raise ConfigError(
            f"{db} holds {len(foreign)} ingested files that are not demo output "
            f"(e.g. {foreign[0]}); "
            "the demo rebuilds its database from scratch, so pass another --db"
        )
    for p in (db, Path(str(db) + ".wal")):
        p.unlink(missing_ok=True)


def _in_demo_folder(path: Path) -> bool:
    return any((parent / DEMO_MARKER).exists() for parent in path.parents)


def run_demo(
    config: SynthConfig,
    out: Path,
    db: Path,
    *,
    now: datetime,
    console: Console,
    workers: int = 1,
    stages: list[Stage] | None = None,
    on_progress: Callable[[str], None] | None = None,
) -> DemoResult:
    """Generate, ingest (database rebuilt from scratch), then run every stage."""
    say = on_progress or (lambda _msg: None)
    say(f"generating {config.n_nodes} nodes x {config.days:g} days (seed {config.seed}) in {out}")
    result = generate(config, out)
    result.truth.setdefault("out", str(out))
    _reset_db(db, out)
    say(f"ingesting {len(result.files)} files into {db}")
    with open_store(db) as store:
        if store.count("xid_catalog") == 0:
            store.load_xid_catalog(load_catalog(None))
        logs = [str(p) for p in result.files if p.name not in NOT_LOGS]
        report = ingest_paths(store, logs, now=now, workers=workers, base_ctx=synth_context())
        for stage in stages if stages is not None else STAGES:
            say(f"stage {stage.__name__}")
            stage(store, result.truth, console)
        summary = summary_doc(store, result.truth)
    return DemoResult(out, db, result.truth, report, summary)

"""Queries behind the Node, Jobs, Predictions, Stragglers and Recovery what-if views."""

from __future__ import annotations

import json
import logging
import math
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl

from faultlens.ingest.store import Store
from faultlens.reports import rollups
from faultlens.reports.filters import Filters

log = logging.getLogger(__name__)

OUT_KINDS = rollups.OUT_KINDS


def _notable(store: Store) -> str:
    """The table holding every warning-or-worse and out-of-service event: the rollup copy (in
    node order, a one-node query reads little) when the snapshot has it."""
    return "rollup_notable" if rollups.available(store) else "events"


# -- node ------------------------------------------------------------------------------------------
def node_summary(store: Store, node: str, f: Filters) -> pl.DataFrame:
    """Events of one node by kind and severity in the range."""
    nf = _node_filters(f, node)
    if rollups.grain_for(store, nf, per_node=True) == "node":
        where, params = rollups.where(nf, "node")
        return store.query(
            "SELECT kind, severity, sum(n)::BIGINT AS events, min(first_ts) AS first, "
            "max(last_ts) AS last FROM rollup_node_day "
            f"WHERE {where} GROUP BY ALL ORDER BY events DESC, kind",
            params,
        )
    where, params = nf.events_where()
    return store.query(
        f"SELECT kind, severity, count(*) AS events, min(ts) AS first, max(ts) AS last "
        f"FROM events WHERE {where} GROUP BY ALL ORDER BY events DESC, kind",
        params,
    )


def node_to_look_at(store: Store, f: Filters) -> str | None:
    """The node with the most error / critical (then warning) events in the range: the node page
    opens on it rather than on the first name in the list."""
    grain = rollups.grain_for(store, f, per_node=True)
    if grain == "node":
        where, params = rollups.where(f, "node")
        table, n = "rollup_node_day", "n"
    else:
        where, params = f.events_where()
        table, n = "events", "1"
    frame = store.query(
        f"SELECT node FROM {table} WHERE {where} AND node IS NOT NULL "
        "AND severity IN (SELECT unnest(?::VARCHAR[])) GROUP BY node "
        f"ORDER BY sum({n}) FILTER (WHERE severity <> 'warning') DESC, sum({n}) DESC, node "
        "LIMIT 1",
        [*params, list(rollups.NOTABLE_SEVERITIES)],
    )
    return frame["node"][0] if frame.height else None


def node_events(store: Store, node: str, f: Filters, limit: int = 200) -> pl.DataFrame:
    where, params = _node_filters(f, node).events_where()
    return store.query(
        "SELECT ts, gpu, source, kind, code, severity, job_id, message, file, line "
        f"FROM {_notable(store)} WHERE {where} AND severity IN ('warning', 'error', 'critical') "
        "ORDER BY ts DESC NULLS LAST LIMIT ?",
        [*params, limit],
    )


def node_event_points(store: Store, node: str, f: Filters, limit: int = 5000) -> pl.DataFrame:
    """Warning-or-worse events of the node for the timeline scatter (capped; messages cut to
    their start, the hover text of each point)."""
    where, params = _node_filters(f, node).events_where()
    return store.query(
        "SELECT ts, kind, coalesce(gpu, '') AS gpu, severity, code, left(message, 160) AS message "
        f"FROM {_notable(store)} WHERE {where} AND ts IS NOT NULL "
        "AND severity IN ('warning', 'error', 'critical') "
        "ORDER BY ts LIMIT ?",
        [*params, limit],
    )


def node_metrics(store: Store, node: str) -> list[str]:
    frame = store.query(
        "SELECT DISTINCT metric FROM telemetry WHERE node = ? ORDER BY metric", [node]
    )
    return frame["metric"].to_list()


def node_telemetry(
    store: Store, node: str, metric: str, f: Filters, points: int = 300
) -> pl.DataFrame:
    """One metric of one node per GPU, averaged into at most ``points`` buckets per GPU over the
    samples' own span within the range (two hours of samples in a ten-year range stay a line)."""
    tw, tparams = f.time_where("ts")
    span = store.query(
        "SELECT min(ts) AS lo, max(ts) AS hi FROM telemetry WHERE node = ? AND metric = ?"
        + "".join(f" AND {w}" for w in tw),
        [node, metric, *tparams],
    ).row(0, named=True)
    lo, hi = span["lo"], span["hi"]
    if lo is None or hi is None:
        return pl.DataFrame(schema={"ts": pl.Datetime("us"), "gpu": pl.Int32, "value": pl.Float64})
    step_s = max(int((hi - lo).total_seconds() / points), 1)
    gpu_sql, params = "", [lo, node, metric, lo, hi + timedelta(seconds=1)]
    if f.gpu and f.gpu.isdigit():
        gpu_sql = " AND gpu = ?"
        params.append(int(f.gpu))
    return store.query(
        f"SELECT time_bucket(INTERVAL '{step_s} seconds', ts, ?::TIMESTAMP) AS ts, gpu, "
        "avg(value) AS value "
        f"FROM telemetry WHERE node = ? AND metric = ? AND ts >= ? AND ts < ?{gpu_sql} "
        "GROUP BY ALL ORDER BY gpu, ts",
        params,
    )


def node_jobs(store: Store, node: str, f: Filters, limit: int = 200) -> pl.DataFrame:
    where, params = _node_filters(f, node).jobs_where("j")
    return store.query(
        'SELECT j.job_id, j.name, j.user, j.state, j.start, j."end", j.n_nodes, j.n_gpus, '
        "a.cause FROM jobs j LEFT JOIN attributions a ON a.job_id = j.job_id "
        f"WHERE {where} ORDER BY j.start DESC NULLS LAST LIMIT ?",
        [*params, limit],
    )


def node_outages(store: Store, node: str, f: Filters) -> pl.DataFrame:
    """Down / drain / resume events of the node: its time out of service."""
    where, params = _node_filters(f, node).events_where()
    return store.query(
        f"SELECT ts, kind, message FROM {_notable(store)} "
        "WHERE kind IN (SELECT unnest(?::VARCHAR[])) "
        f"AND {where} ORDER BY ts",
        [list(OUT_KINDS), *params],
    )


def node_risk(store: Store, node: str, f: Filters) -> pl.DataFrame:
    """The node's rows of the newest prediction run: score, action and the reasons."""
    hi = f.until or datetime(9999, 1, 1)
    frame = store.query(
        "SELECT made_at, gpu, target, score, action, top_features, model_version FROM predictions "
        "WHERE node = ? AND made_at < ? AND run_id = (SELECT run_id FROM predictions "
        "WHERE node = ? AND made_at < ? ORDER BY made_at DESC LIMIT 1) "
        "ORDER BY score DESC",
        [node, hi, node, hi],
    )
    return frame


def reasons(top_features: str | None) -> list[dict[str, Any]]:
    """The JSON list of {feature, value, contribution} a prediction carries, parsed."""
    if not top_features:
        return []
    try:
        doc = json.loads(top_features)
    except ValueError:
        return []
    return [d for d in doc if isinstance(d, dict)] if isinstance(doc, list) else []


def lemon_of(table: pl.DataFrame, node: str) -> dict[str, Any] | None:
    """The node's row of a ``lemons`` table, if it has any signal."""
    rows = table.filter(pl.col("node") == node) if table.height else table
    return rows.row(0, named=True) if rows.height else None


def lemons(store: Store, as_of: datetime, n: int | None = 20) -> pl.DataFrame:
    from faultlens.models.lemons import lemon_table

    table = lemon_table(store, as_of)
    return table.head(n) if table.height and n is not None else table


def _node_filters(f: Filters, node: str) -> Filters:
    return Filters(since=f.since, until=f.until, nodes=(node,), gpu=f.gpu, job_id=f.job_id)


# -- jobs ------------------------------------------------------------------------------------------
def failed_jobs(store: Store, f: Filters, *, offset: int = 0, limit: int = 100) -> pl.DataFrame:
    where, params = f.jobs_where("j")
    return store.query(
        'SELECT j.job_id, j.name, j.user, j.state, j."end", j.n_nodes, j.n_gpus, '
        "coalesce(a.cause, 'not attributed') AS cause, a.node AS blamed_node, "
        "a.evidence_kind, a.evidence_code, round(a.gpu_hours_lost, 1) AS gpu_hours_lost "
        "FROM jobs j LEFT JOIN attributions a ON a.job_id = j.job_id "
        f"WHERE j.state IN ('FAILED', 'NODE_FAIL', 'TIMEOUT') AND {where} "
        'ORDER BY j."end" DESC NULLS LAST, j.job_id LIMIT ? OFFSET ?',
        [*params, int(limit), int(offset)],
    )


def taxonomy(store: Store, f: Filters) -> pl.DataFrame:
    """Interruptions by root-cause category in the range (the Llama 3 table's shape)."""
    where, params = f.jobs_where("j")
    return store.query(
        "SELECT a.cause, count(*) AS interruptions, "
        "round(100.0 * count(*) / sum(count(*)) OVER (), 1) AS share_pct, "
        "round(sum(a.gpu_hours_lost), 1) AS gpu_hours_lost "
        "FROM attributions a JOIN jobs j ON j.job_id = a.job_id "
        f"WHERE {where} GROUP BY a.cause ORDER BY interruptions DESC, a.cause",
        params,
    )


# -- predictions -----------------------------------------------------------------------------------
def model_card(models_dir: Path, version: str | None = None) -> dict[str, Any] | None:
    """The model card of ``version`` (the model that made the predictions shown), else of the
    model ``LATEST`` names; None when there is none."""
    if version and (Path(models_dir) / version / "model_card.json").is_file():
        card = Path(models_dir) / version / "model_card.json"
        try:
            return json.loads(card.read_text())
        except (OSError, ValueError) as e:
            log.warning("cannot read model card %s: %s", card, e)
    latest = Path(models_dir) / "LATEST"
    if not latest.is_file():
        return None
    card = Path(models_dir) / latest.read_text().strip() / "model_card.json"
    try:
        return json.loads(card.read_text())
    except (OSError, ValueError) as e:
        log.warning("cannot read model card %s: %s", card, e)
        return None


def threshold_note(card: dict[str, Any]) -> str | None:
    """The operating threshold and where its floor came from (``TrainConfig.low_share_floor``),
    in words, from a model card (or ``train --json``'s document); None for a card without the
    floor's account (models trained before it)."""
    floor = (card.get("calibration") or {}).get("floor")
    thr = (card.get("thresholds") or {}).get("drain_after_jobs")
    if not floor or thr is None:
        return None
    seen, n = floor.get("seen_share"), floor["failure_episodes"]
    why = (
        f"the out-of-fold scores saw {seen:.0%} of the {n} failures of the fitting window coming "
        f"(above {floor['seen_level']:g} in the {card['horizon_h']:g} h before)"
        if seen is not None
        else "no failures in the fitting window"
    )
    least = floor.get("min_episodes")
    if seen is not None and least is not None and n < least:
        why += f"; fewer than {least}, too few to lower the floor"
    head = f"operating threshold {thr:.3f}" if math.isfinite(thr) else "no operating threshold"
    return f"{head}: floor {floor['floor']:.3f}, {why}"


def baseline_metrics(card: dict[str, Any]) -> pl.DataFrame:
    """The card's metrics, one row per scorer (model, rule baseline, lemon baseline)."""
    rows = []
    for scorer, m in (card.get("metrics") or {}).items():
        if isinstance(m, dict):
            rows.append(
                {
                    "scorer": scorer,
                    **{
                        k: m.get(k)
                        for k in (
                            "pr_auc",
                            "precision",
                            "recall",
                            "precision_at_k",
                            "median_lead_time_h",
                        )
                    },
                }
            )
    return pl.DataFrame(
        rows,
        schema={
            "scorer": pl.String,
            "pr_auc": pl.Float64,
            "precision": pl.Float64,
            "recall": pl.Float64,
            "precision_at_k": pl.Float64,
            "median_lead_time_h": pl.Float64,
        },
        strict=False,
    )


def calibration(store: Store, f: Filters, bins: int = 10) -> pl.DataFrame:
    """Predicted score against the observed failure rate within the horizon, per score bin."""
    from faultlens.models.target import TARGET_EVENT_SQL, target_event_params

    tw, tparams = f.time_where("p.made_at")
    where = " AND ".join(["p.target = 'failure'", *tw]) if tw else "p.target = 'failure'"
    targets = _notable(store)  # every target event is in the rollup copy
    target_sql, target_params = TARGET_EVENT_SQL, target_event_params()
    return store.query(
        f"""
        WITH p AS (SELECT row_number() OVER () AS pid, * FROM predictions p WHERE {where}),
        hit AS (
            SELECT p.pid, any_value(p.score) AS score, bool_or(e.ts IS NOT NULL) AS failed
            FROM p LEFT JOIN {targets} e ON e.node = p.node AND e.ts >= p.made_at
             AND e.ts < p.made_at + to_microseconds(CAST(p.horizon * 3.6e9 AS BIGINT))
             AND {target_sql}
            GROUP BY p.pid
        )
        SELECT least(floor(score * ?), ? - 1) / ? AS bin_lo, avg(score) AS predicted,
               avg(CAST(failed AS DOUBLE)) AS observed, count(*) AS rows
        FROM hit GROUP BY 1 ORDER BY 1
        """,
        [*tparams, *target_params, bins, bins, bins],
    )


# -- stragglers ------------------------------------------------------------------------------------
def stragglers(store: Store, f: Filters) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(stragglers, per-job cost) for jobs that ended in the range, on the selected nodes."""
    found, jobs = detected_stragglers(store, f.job_id, f.since)
    return select_stragglers(found, jobs, f)


def detected_stragglers(
    store: Store, job_id: str | None, since: datetime | None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(stragglers, per-job cost) of every job (or one) that ended after ``since``: the detection
    run the dashboard keeps per snapshot; node and end-of-range filters apply afterwards."""
    from faultlens.models.stragglers import detect

    report = detect(store, job_id=job_id, since=since)
    return report.stragglers, report.jobs


def select_stragglers(
    found: pl.DataFrame, jobs: pl.DataFrame, f: Filters
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The detections whose onset is before the range's end, on the selected nodes."""
    s, j = found, jobs
    if f.until is not None and s.height and "onset" in s.columns:
        s = s.filter(pl.col("onset") < f.until)
        j = j.filter(pl.col("job_id").is_in(s["job_id"].unique().to_list()))
    if f.nodes and s.height:
        s = s.filter(pl.col("node").is_in(list(f.nodes)))
    return s, j


# -- recovery what-if ------------------------------------------------------------------------------
def whatif(
    store: Store,
    since: datetime | None,
    until: datetime | None,
    strategies: list[str],
    *,
    interval_min: float,
    spares: int | None,
    job_gpus: int | None,
    resamples: int = 20,
) -> list[Any]:
    """Rank ``strategies`` on the fleet's interruption trace of the range (replay's public API)."""
    return whatif_on(
        interruption_trace(store, since, until),
        strategies,
        interval_min=interval_min,
        spares=spares,
        job_gpus=job_gpus,
        resamples=resamples,
    )


def interruption_trace(store: Store, since: datetime | None, until: datetime | None) -> Any:
    """The fleet's interruption trace of the range (``replay.from_db``): the part of a what-if
    that reads the database, computed once per snapshot and range."""
    from faultlens.replay import from_db

    return from_db(store, since, until)


def whatif_on(
    trace: Any,
    strategies: list[str] | tuple[str, ...],
    *,
    interval_min: float,
    spares: int | None,
    job_gpus: int | None,
    resamples: int = 20,
) -> list[Any]:
    """Rank ``strategies`` replayed on ``trace`` (no database access)."""
    from faultlens.replay import JobSpec, rank, replay

    if trace.n_events == 0:
        return []
    job = JobSpec(interval_min=float(interval_min), spares=spares, gpus=job_gpus)
    return rank(replay(trace, list(strategies), job, resamples=resamples))


def scores_frame(scores: list[Any]) -> pl.DataFrame:
    """Replay scores as a table: one row per strategy, badput buckets as columns."""
    rows = []
    for s in scores:
        d = s.to_json()
        rows.append(
            {
                "strategy": d["name"],
                "ettr": d["ettr"],
                "ettr_lo": d["ettr_ci"][0],
                "ettr_hi": d["ettr_ci"][1],
                "goodput_gpu_h": d["goodput_gpu_h"],
                "cost_usd": d["cost_usd"],
                "restarts": d["restarts"],
                "interval_min": d["params"].get("interval_min"),
                **{f"badput_{k}": v for k, v in d["badput_gpu_h"].items()},
                "spare_idle": d["spare_idle_gpu_h"],
            }
        )
    return pl.DataFrame(rows)


# -- one job's attribution -------------------------------------------------------------------------
def job_attribution(store: Store, job_id: str) -> dict[str, Any] | None:
    """The job with its attribution row (cause, blamed node, deciding evidence), or None."""
    frame = store.query(
        'SELECT j.job_id, j.name, j.user, j.partition, j.state, j.start, j."end", j.nodes, '
        "j.n_gpus, a.cause, a.node AS blamed_node, a.evidence_kind, a.evidence_code, "
        "a.evidence_ts, a.gpu_hours_lost FROM jobs j "
        "LEFT JOIN attributions a ON a.job_id = j.job_id WHERE j.job_id = ? LIMIT 1",
        [job_id],
    )
    return frame.row(0, named=True) if frame.height else None


def job_evidence(store: Store, job: dict[str, Any], limit: int = 50) -> pl.DataFrame:
    """Warning-or-worse events on the job's nodes in the window the attribution looks at (its
    end minus ``WINDOW_BEFORE`` to its end plus ``WINDOW_AFTER``), the deciding one first."""
    from faultlens.ingest.attribution import WINDOW_AFTER, WINDOW_BEFORE

    end = job.get("end")
    if end is None or not job.get("nodes"):
        return pl.DataFrame(schema={"deciding": pl.Boolean, "ts": pl.Datetime("us")})
    lo = min(end - WINDOW_BEFORE, job.get("evidence_ts") or end)
    return store.query(
        "SELECT coalesce(e.node = ? AND e.kind = ? AND e.ts = ? "
        "AND e.code IS NOT DISTINCT FROM ?, false) AS deciding, "
        "e.ts, e.node, e.gpu, e.source, e.kind, e.code, e.severity, e.message, e.file, e.line "
        f"FROM {_notable(store)} e WHERE e.node IN (SELECT unnest(?::VARCHAR[])) "
        "AND e.ts >= ? AND e.ts <= ? AND e.severity IN ('warning', 'error', 'critical') "
        "ORDER BY deciding DESC, e.ts, e.node LIMIT ?",
        [
            job.get("blamed_node"),
            job.get("evidence_kind"),
            job.get("evidence_ts"),
            job.get("evidence_code"),
            list(job["nodes"]),
            lo,
            end + WINDOW_AFTER,
            int(limit),
        ],
    )

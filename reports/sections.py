"""Report sections (the same views as the dashboard pages), and helpers both front ends share.

``build_sections(store, f, models_dir)`` returns one ``Section`` per dashboard page: headline
numbers, figures (``reports.figures``) and tables, ready for the HTML writer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import polars as pl

from faultlens.ingest.errors import FaultlensError
from faultlens.ingest.store import Store
from faultlens.reports import figures as F
from faultlens.reports import q_detail, q_fleet, q_state
from faultlens.reports.filters import Filters
from faultlens.reports.q_state import WATCH_THRESHOLD
from faultlens.reports.reliability import rate_text, window_rate

log = logging.getLogger(__name__)

REPORT_STRATEGIES = (
    "checkpoint",
    "young-daly",
    "in-memory",
    "hot-spares",
    "elastic",
    "predictive-drain",
)


@dataclass
class Section:
    title: str
    anchor: str
    numbers: list[tuple[str, str]] = field(default_factory=list)
    figures: list[go.Figure] = field(default_factory=list)
    tables: list[tuple[str, pl.DataFrame]] = field(default_factory=list)
    note: str | None = None


# -- helpers shared with the dashboard -------------------------------------------------------------
def fleet_ettr(store: Store, since: datetime | None, until: datetime | None) -> float | None:
    """ETTR of a fleet-wide job checkpointing every 30 min, replayed on the range (no bootstrap).

    The whole fleet's interruptions: node filters do not apply (a job spans the fleet)."""
    from faultlens.replay import from_db

    return ettr_of(from_db(store, since, until))


def ettr_of(trace: Any) -> float | None:
    """ETTR of a fleet-wide job checkpointing every 30 min replayed on ``trace`` (no bootstrap)."""
    from faultlens.replay import JobSpec, replay

    if trace.span_h <= 1.0 and trace.n_events == 0:
        return None
    return replay(trace, ["checkpoint"], JobSpec(), resamples=0)[0].ettr


def risk_table(frame: pl.DataFrame) -> pl.DataFrame:
    """Predictions with their reasons spelled out: ``feature=value (+contribution)``."""
    if frame.height == 0:
        return frame
    text = [
        "; ".join(
            f"{r.get('feature')}={_fmt(r.get('value'))} ({_fmt(r.get('contribution'), '+')})"
            for r in q_detail.reasons(tf)
        )
        for tf in frame["top_features"].to_list()
    ]
    keep = [c for c in ("node", "gpu", "score", "action", "made_at") if c in frame.columns]
    return frame.select(keep).with_columns(
        pl.col("score").round(3), pl.Series("reasons", text, pl.String)
    )


def count_at_risk(risk: pl.DataFrame, threshold: float = WATCH_THRESHOLD) -> int:
    return above_watch(risk, threshold)["node"].n_unique() if risk.height else 0


def above_watch(risk: pl.DataFrame, threshold: float = WATCH_THRESHOLD) -> pl.DataFrame:
    """The prediction rows at or above the watch threshold: what "at risk" lists."""
    return risk.filter(pl.col("score") >= threshold) if risk.height else risk


def _fmt(x: Any, sign: str = "") -> str:
    if isinstance(x, float):
        return f"{x:{sign}.3g}"
    return str(x)


# -- the sections ----------------------------------------------------------------------------------
def _safe(build: Callable[[], Section], title: str, anchor: str) -> Section:
    """A section whose data is missing says so instead of failing the whole report."""
    try:
        return build()
    except (FaultlensError, ValueError) as e:
        log.warning("section %s failed: %s", title, e)
        return Section(title, anchor, note=f"not available: {e}")


def overview(store: Store, f: Filters) -> Section:
    nodes = q_fleet.node_list(store)
    episodes = q_fleet.failures(store, f)
    rate = window_rate(store, f)
    node_days = rate.node_days
    lost = q_fleet.jobs_lost(store, f)
    risk = q_fleet.latest_predictions(store, f)
    ettr = fleet_ettr(store, f.since, f.until)
    numbers = [
        ("Failures / 1000 node-days", rate_text(rate)),
        ("Failures", f"{rate.n_failures:,} over {node_days:,.0f} node-days ({rate.fleet.note})"),
        ("MTBF per node", f"{rate.mtbf_h:,.0f} h" if rate.n_failures else "no failures"),
        ("ETTR (checkpoint every 30 min)", f"{ettr:.3f}" if ettr is not None else "-"),
        (
            "Jobs lost",
            f"{lost['failed_jobs']:,} of {lost['jobs']:,} ({lost['gpu_hours_lost']:,.0f} GPU-h)",
        ),
        ("Nodes at risk now", f"{count_at_risk(risk)}"),
    ]
    counts = q_state.state_counts(q_state.fleet_state(store, f, nodes))
    numbers.append(("Nodes by state", ", ".join(f"{n:,} {s}" for s, n in counts.items())))
    return Section(
        "Overview",
        "overview",
        numbers,
        [
            F.fig_failure_trend(q_fleet.failure_trend(rate.failures, f, rate.fleet.nodes)),
            F.fig_mtbf(q_fleet.mtbf_by_component(episodes, node_days)),
            F.fig_top_xids(q_fleet.top_xids(store, f)),
            F.fig_at_risk(risk),
        ],
        [
            ("Open incidents (one row per node or job)", _incident_rows(store, f)),
            ("Top Xids", q_fleet.top_xids(store, f)),
        ],
    )


def _incident_rows(store: Store, f: Filters) -> pl.DataFrame:
    frame = q_state.incidents(store, f, limit=15)
    return frame.select(
        "subject",
        "cause",
        "events",
        "ranks",
        "first_seen",
        "last_seen",
        "action",
        pl.concat_str([pl.col("file"), pl.col("line").cast(pl.String)], separator=":").alias(
            "evidence"
        ),
    )


def events(store: Store, f: Filters) -> Section:
    total = q_fleet.event_count(store, f)
    latest = q_state.repeated_events(store, f, limit=30)
    facets = q_fleet.event_facets(store, f.since, f.until)
    return Section(
        "Events",
        "events",
        [("Events", f"{total:,}")],
        [F.fig_event_timeline(q_fleet.event_timeline(store, f))],
        [
            ("Events by kind", facets["kind"].rename({"value": "kind"}).head(20)),
            ("Errors and critical events, repeated lines grouped", latest),
        ],
    )


def nodes(store: Store, f: Filters) -> Section:
    as_of = f.until or datetime(9999, 1, 1)
    lemons = q_detail.lemons(store, as_of)
    flagged = lemons.filter(pl.col("flagged")).height if lemons.height else 0
    return Section(
        "Nodes to look at",
        "nodes",
        [("Lemon nodes (28 days)", f"{flagged}")],
        [],
        [
            ("Lemon ranking", lemons.drop("last_failure", strict=False).head(15)),
            (
                f"At risk now (score >= {WATCH_THRESHOLD})",
                risk_table(above_watch(q_fleet.latest_predictions(store, f, n=200))).head(20),
            ),
        ],
    )


def jobs(store: Store, f: Filters) -> Section:
    tax = q_detail.taxonomy(store, f)
    lost = q_fleet.jobs_lost(store, f)
    return Section(
        "Jobs",
        "jobs",
        [("Failed jobs", f"{lost['failed_jobs']:,}"), ("Jobs in range", f"{lost['jobs']:,}")],
        [F.fig_taxonomy(tax)],
        [("Interruption taxonomy", tax), ("Failed jobs", q_detail.failed_jobs(store, f, limit=50))],
    )


def predictions(store: Store, f: Filters, models_dir: Path | None) -> Section:
    risk = q_fleet.latest_predictions(store, f, n=50)
    made_by = risk["model_version"][0] if risk.height else None
    card = q_detail.model_card(models_dir, made_by) if models_dir else None
    base = q_detail.baseline_metrics(card) if card else pl.DataFrame()
    numbers = [("Model", str(card.get("model_version"))) if card else ("Model", "none trained")]
    floor = ((card or {}).get("calibration") or {}).get("floor")
    thr = ((card or {}).get("thresholds") or {}).get("drain_after_jobs")
    if floor and thr is not None:  # the text says why: q_detail.threshold_note
        numbers.append(("Alert threshold", f"{thr:.3f} (floor {floor['floor']:.3f})"))
    return Section(
        "Predictions",
        "predictions",
        numbers,
        [
            F.fig_at_risk(risk),
            F.fig_model_vs_baselines(base),
            F.fig_calibration(q_detail.calibration(store, f)),
        ],
        [("Model vs baselines", base), ("At-risk nodes and GPUs", risk_table(risk))],
        None if card else "No model card: run `faultlens train`.",
    )


def stragglers(store: Store, f: Filters) -> Section:
    found, per_job = q_detail.stragglers(store, f)
    wasted = float(found["wasted_gpu_h"].sum() or 0) if found.height else 0.0
    return Section(
        "Stragglers",
        "stragglers",
        [("Stragglers", f"{found.height:,}"), ("GPU-hours wasted", f"{wasted:,.1f}")],
        [F.fig_straggler_causes(found), F.fig_straggler_slowdown(found)],
        [("Slow GPUs and nodes", found.head(30)), ("Cost per job", per_job.head(30))],
    )


def recovery(store: Store, f: Filters) -> Section:
    scores = q_detail.whatif(
        store,
        f.since,
        f.until,
        list(REPORT_STRATEGIES),
        interval_min=30.0,
        spares=None,
        job_gpus=None,
    )
    frame = q_detail.scores_frame(scores) if scores else pl.DataFrame()
    numbers = (
        [("Best strategy", f"{frame['strategy'][0]} (ETTR {frame['ettr'][0]:.4f})")]
        if scores
        else [("Best strategy", "no interruptions to replay")]
    )
    return Section(
        "Recovery what-if",
        "recovery",
        numbers,
        [F.fig_strategy_ranking(frame), F.fig_badput(frame)],
        [("Ranking (fewest dollars lost first)", frame)],
    )


def reliability(store: Store, f: Filters, dataset: str | None = None) -> Section:
    """The site's reliability over the report's window, or a named dataset's over its own."""
    from faultlens.reports import reliability as R

    if dataset is None:
        view = R.reliability_view(store, since=f.since, until=f.until)
        title, anchor = "Reliability", "reliability"
    else:
        view = R.reliability_view(store, dataset)
        title, anchor = f"Reliability: dataset {dataset}", f"reliability-{dataset}"
    note = view.doc["fleet"]["note"] if view.doc else "no failures in this range"
    return Section(
        title,
        anchor,
        R.numbers_of(view.doc),
        R.figures_of(view),
        [("By category and component", R.category_table(view.doc))],
        note=note,
    )


def data_health(store: Store) -> Section:
    t = q_fleet.ingest_totals(store)
    _, quarantined = q_fleet.quarantine_page(store, limit=30)
    return Section(
        "Data health",
        "data-health",
        [
            ("Files", f"{t['files']:,}"),
            ("Lines", f"{t['lines']:,}"),
            ("Parsed", f"{t['parsed']:,}"),
            ("Noise", f"{t['noise']:,}"),
            ("Quarantined", f"{t['quarantined']:,}"),
        ],
        [
            F.fig_ingest(q_fleet.ingest_by_format(store)),
            F.fig_quarantine_reasons(q_fleet.quarantine_reasons(store)),
        ],
        [("Quarantined lines (first 30)", quarantined)],
    )


def _dataset_sections(store: Store, f: Filters) -> list[tuple[str, str, Callable[[], Section]]]:
    """One reliability section per named dataset (public traces, other sites' records)."""
    from faultlens.reports.reliability import datasets

    try:
        names = datasets(store)[1:]
    except FaultlensError:
        return []
    return [
        (f"Reliability: {d}", f"reliability-{d}", lambda d=d: reliability(store, f, d))
        for d in names
    ]


def _straggler_forecast(store: Store, f: Filters) -> Section:
    from faultlens.reports.straggler_forecast import section  # scikit-learn: on demand

    return section(store, f)


def build_sections(store: Store, f: Filters, models_dir: Path | None = None) -> list[Section]:
    builders: list[tuple[str, str, Callable[[], Section]]] = [
        ("Overview", "overview", lambda: overview(store, f)),
        ("Events", "events", lambda: events(store, f)),
        ("Nodes to look at", "nodes", lambda: nodes(store, f)),
        ("Jobs", "jobs", lambda: jobs(store, f)),
        ("Predictions", "predictions", lambda: predictions(store, f, models_dir)),
        ("Stragglers", "stragglers", lambda: stragglers(store, f)),
        ("Straggler forecast", "straggler-forecast", lambda: _straggler_forecast(store, f)),
        ("Recovery what-if", "recovery", lambda: recovery(store, f)),
        ("Reliability", "reliability", lambda: reliability(store, f)),
        *_dataset_sections(store, f),
        ("Data health", "data-health", lambda: data_health(store)),
    ]
    return [_safe(build, title, anchor) for title, anchor, build in builders]

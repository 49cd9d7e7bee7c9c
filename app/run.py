"""The scheduled job behind ``faultlens run``: ingest what is new, predict, export, alert.

One run, under a file lock next to the database (a second concurrent run gets ``LockedError``;
the lock is an ``flock``, so a run killed with SIGKILL never leaves it stale):

1. ingest the configured paths (exactly-once: only new lines of grown logs are read);
2. score every node and GPU with the latest model and write them to ``predictions``;
3. write the Prometheus textfile (atomically: temporary file, fsync, rename);
4. reconcile alerts with Alertmanager (new / refreshed / resolved; see ``app.alerts``);
5. report each alert and a run summary as JSON lines through ``emit``.

The run is idempotent: a second run at the same time changes nothing and sends nothing. Killed at
any point, it leaves each ingested file and the run's predictions all there or not at all (one
transaction each), and the textfile and alert state the old or the new complete file. DuckDB has
one writer at a time: while ``faultlens ingest`` holds the database the run waits for it up to
``db_wait_s`` seconds, then gives up with ``DatabaseBusyError`` (exit code 6, try again later).
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
import tomllib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl

from faultlens.app import alerts as am
from faultlens.app import run_cache
from faultlens.app.common import default_db_path
from faultlens.app.common import open_store as open_db
from faultlens.app.run_cache import RunPrediction
from faultlens.ingest.attribution import refresh
from faultlens.ingest.base import ParseContext
from faultlens.ingest.catalog import load_catalog
from faultlens.ingest.errors import ConfigError, LockedError, ModelError
from faultlens.ingest.http_config import HttpConfig, build_session, parse_http_config
from faultlens.ingest.pipeline import IngestReport, ingest_paths
from faultlens.ingest.reader import LIVE_WRITE_S
from faultlens.ingest.store import DatabaseBusyError, Store
from faultlens.ingest.watermarks import data_mark
from faultlens.ingest.zones import check_zone, zone_hosts, zone_options, zone_paths
from faultlens.models.actions import ACTION_RANK, RiskAction
from faultlens.models.drains import update_drain_outcomes
from faultlens.models.freshness import default_as_of, newest_data, quiet_sources, source_last_seen
from faultlens.models.registry import default_models_dir, load_card

log = logging.getLogger(__name__)


@dataclass
class RunConfig:
    db: Path
    ingest_paths: list[str] = field(default_factory=list)
    node_from_path: str | None = None  # [ingest] node_from_path: regex with a ``node`` group
    tz: str | None = None  # [ingest] tz: the zone of stamps that carry none (IANA; UTC if unset)
    # [ingest.tz_paths] "GLOB" = "ZONE": a group of files' zone (the first match; else ``tz``)
    tz_paths: list[tuple[str, str]] = field(default_factory=list)
    # [ingest.tz_hosts] "GLOB" = "ZONE": the zone of hosts a syslog head names (the first match)
    tz_hosts: list[tuple[str, str]] = field(default_factory=list)
    models_dir: Path | None = None
    model_version: str | None = None
    scheduler: str = "slurm"
    textfile: Path | None = None
    alertmanager_url: str | None = None
    min_action: str = RiskAction.DRAIN_AFTER_JOBS.value
    ttl_h: float = 4.0
    refresh_h: float = 2.0
    timeout_s: float = 10.0
    state_file: Path | None = None
    db_wait_s: float = 60.0
    # "logs stopped": a source silent for this long before now (fleet-wide, or per node for
    # telemetry) is an alert of its own; ``quiet_sources`` limits the fleet-wide check.
    logs_quiet_h: float = 6.0
    quiet_sources: list[str] | None = None
    dashboard_url: str = "http://127.0.0.1:8501"  # alerts link to the node's page (generatorURL)
    runbook_url: str = am.XID_RUNBOOK_URL
    prometheus_url: str | None = None
    prometheus_http: HttpConfig = field(default_factory=HttpConfig)
    alertmanager_http: HttpConfig = field(default_factory=HttpConfig)
    # where *_env secrets are looked up (the CLI passes os.environ); never printed
    environ: Mapping[str, str] = field(default_factory=dict, repr=False)
    live_write_s: float = LIVE_WRITE_S  # a log modified this recently is still being written

    @property
    def lock_file(self) -> Path:
        return self.db.with_name(self.db.name + ".lock")

    @property
    def alert_state(self) -> Path:
        return self.state_file or self.db.with_name(self.db.name + ".alerts.json")


def load_config(
    path: Path, *, db: Path | None = None, environ: Mapping[str, str] | None = None
) -> RunConfig:
    """Read ``faultlens.toml``; relative paths are relative to the file's folder. ``environ``:
    where ``http_config`` secrets given as ``*_env`` are read from."""
    try:
        doc = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"cannot read config {path}: {e}") from e
    base = Path(path).resolve().parent

    def rel(p: str | None) -> Path | None:
        return None if p in (None, "") else (base / str(p)).resolve()

    def rel_glob(p: str) -> str:
        return p if os.path.isabs(p) else str(base / p)

    top, ing = doc.get("faultlens", {}), doc.get("ingest", {})
    prom, amc = doc.get("prometheus", {}), doc.get("alertmanager", {})
    zones = ing.get("tz_paths") or {}
    if not isinstance(zones, dict):
        raise ConfigError(f'{path}: [ingest.tz_paths] is a table of "GLOB" = "ZONE" lines')
    host_zones = ing.get("tz_hosts") or {}
    if not isinstance(host_zones, dict):
        raise ConfigError(f'{path}: [ingest.tz_hosts] is a table of "GLOB" = "ZONE" lines')
    try:
        cfg = RunConfig(
            db=db or rel(top.get("db")) or default_db_path(),
            ingest_paths=[rel_glob(p) for p in ing.get("paths", [])],
            node_from_path=ing.get("node_from_path") or None,
            tz=check_zone(ing.get("tz")),
            tz_paths=zone_paths(zones.items(), base),
            tz_hosts=zone_hosts(host_zones.items()),
            models_dir=rel(top.get("models_dir")),
            model_version=top.get("model_version"),
            scheduler=str(top.get("scheduler", "slurm")),
            textfile=rel(prom.get("textfile")),
            alertmanager_url=amc.get("url") or None,
            min_action=str(amc.get("min_action", RiskAction.DRAIN_AFTER_JOBS.value)),
            ttl_h=float(amc.get("ttl_h", 4.0)),
            refresh_h=float(amc.get("refresh_h", 2.0)),
            timeout_s=float(amc.get("timeout_s", 10.0)),
            state_file=rel(amc.get("state_file")),
            db_wait_s=float(top.get("db_wait_s", 60.0)),
            logs_quiet_h=float(top.get("logs_quiet_h", 6.0)),
            quiet_sources=top.get("quiet_sources"),
            dashboard_url=str(doc.get("dashboard", {}).get("url", "http://127.0.0.1:8501")),
            runbook_url=str(amc.get("runbook_url", am.XID_RUNBOOK_URL)),
            prometheus_url=prom.get("url") or None,
            prometheus_http=parse_http_config(
                prom.get("http_config"), base=base, where="prometheus.http_config"
            ),
            alertmanager_http=parse_http_config(
                amc.get("http_config"), base=base, where="alertmanager.http_config"
            ),
            environ=dict(environ or {}),
        )
    except (TypeError, ValueError) as e:
        raise ConfigError(f"invalid value in {path}: {e}") from e
    if cfg.min_action not in {a.value for a in RiskAction} - {"none"}:
        raise ConfigError(
            f"{path}: alertmanager.min_action must be watch, drain_after_jobs or drain_now"
        )
    if cfg.scheduler not in ("slurm", "kubernetes"):
        raise ConfigError(f"{path}: faultlens.scheduler must be slurm or kubernetes")
    if cfg.refresh_h >= cfg.ttl_h:
        raise ConfigError(f"{path}: alertmanager.refresh_h must be below ttl_h")
    return cfg


def load_section(path: Path, name: str) -> dict[str, Any]:
    """One table of ``faultlens.toml`` (``{}`` when it has none), e.g. ``[dashboard]``."""
    try:
        doc = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"cannot read config {path}: {e}") from e
    section = doc.get(name, {})
    if not isinstance(section, dict):
        raise ConfigError(f"{path}: [{name}] must be a table")
    return section


@contextmanager
def run_lock(path: Path) -> Iterator[None]:
    """An exclusive, non-blocking ``fcntl`` lock; the kernel releases it if the process dies."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as e:
            raise LockedError(f"another faultlens run holds {path}") from e
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)


def open_store(path: Path, wait_s: float) -> Store:
    """Open ``path`` read-write, waiting up to ``wait_s`` seconds while another process
    (an ingest) holds it; then ``DatabaseBusyError``."""
    deadline = time.monotonic() + wait_s
    pause_s = 0.1
    while True:
        try:
            return open_db(path)
        except DatabaseBusyError:
            if time.monotonic() + pause_s > deadline:
                raise
            log.info("database %s busy, retrying in %.1f s", path, pause_s)
            time.sleep(pause_s)
            pause_s = min(pause_s * 2, 2.0)


@dataclass
class RunOutcome:
    summary: dict[str, Any]
    needs_human: list[str]
    ingest_failed: bool = False
    delivery_failed: bool = False


def ingest_context(cfg: RunConfig) -> ParseContext:
    """What every file a run ingests starts from: the ``[ingest]`` node pattern and zones."""
    options = zone_options(cfg.tz, cfg.tz_paths, cfg.tz_hosts)
    return ParseContext(file="", node_pattern=cfg.node_from_path, options=options)


def run_once(
    cfg: RunConfig,
    *,
    now: datetime,
    as_of: datetime | None = None,
    emit: Callable[[dict[str, Any]], None] = lambda _d: None,
) -> RunOutcome:
    """One scheduled run (see the module doc). ``now`` is wall-clock time; ``as_of`` the time
    the prediction is for (default: just after the newest data, never ``now``)."""
    with run_lock(cfg.lock_file):
        models_dir = cfg.models_dir or default_models_dir(cfg.db)
        card, _ = load_card(models_dir, cfg.model_version)  # the estimator: only to score
        report, pred, last_seen, drains = _ingest_and_predict(
            cfg, models_dir, card, now=now, as_of=as_of
        )
        as_of = pred.as_of
        stopped = _logs_stopped(cfg, last_seen, now)
        horizon_h = float(card["horizon_h"])
        if cfg.textfile is not None:
            am.remove_stale_temporaries(cfg.textfile)  # left by a run killed mid-write
            log.info("writing textfile %s", cfg.textfile)
            am.write_textfile(
                cfg.textfile,
                am.textfile_lines(
                    pred.rows,
                    horizon_h=horizon_h,
                    model_version=pred.model_version,
                    run_id=pred.run_id,
                    now=now,
                    last_seen=last_seen,
                ),
            )
            log.info("textfile written")
        floor = ACTION_RANK[RiskAction(cfg.min_action)]
        paged = [a for a in pred.alerts if ACTION_RANK[RiskAction(a["action"])] >= floor]
        for a in pred.alerts:
            emit({"type": "alert", "run_id": pred.run_id, **a})
        for q in stopped:
            emit({"type": "logs_stopped", "run_id": pred.run_id, **q})
        plan, delivery_error = _alertmanager(
            cfg, paged, pred.run_id, pred.model_version, horizon_h, now, stopped
        )
    ingest_failed = bool(report and any(f.status == "failed" for f in report.files))
    new_actionable = [
        a["labels"].get("node", a["labels"].get("source", ""))
        for a in plan.new
        if a["labels"]["severity"] in ("warning", "critical")
    ]
    needs = [f"new alert: {n}" for n in new_actionable]
    needs += [
        f"logs stopped: {q['source']}" + (f" on {q['node']}" if q["node"] else "") for q in stopped
    ]
    if ingest_failed:
        needs.append("some inputs failed to ingest")
    if delivery_error:
        needs.append(delivery_error)
    summary = {
        "type": "run",
        "run_id": pred.run_id,
        "as_of": as_of.isoformat(),
        "now": now.isoformat(),
        "data_age_h": round((now - as_of).total_seconds() / 3600.0, 2),
        "logs_stopped": len(stopped),
        "model_version": pred.model_version,
        "ingest": report.totals if report else None,
        "scored": pred.rows.height,
        "reused": pred.reused,
        "alerts": len(pred.alerts),
        "paged": len(paged),
        "sent": {
            "new": len(plan.new),
            "refreshed": len(plan.refreshed),
            "resolved": len(plan.resolved),
            "unchanged": plan.unchanged,
        },
        "drain_outcomes": drains,
        "textfile": str(cfg.textfile) if cfg.textfile else None,
        "needs_human": needs,
    }
    emit(summary)
    return RunOutcome(summary, needs, ingest_failed, delivery_error is not None)


def _ingest_and_predict(
    cfg: RunConfig,
    models_dir: Path,
    card: dict[str, Any],
    *,
    now: datetime,
    as_of: datetime | None,
) -> tuple[IngestReport | None, RunPrediction, pl.DataFrame, dict[str, int]]:
    """Ingest the configured paths, score as of ``as_of`` (default: just after the newest
    data), store the run's predictions (one transaction) and update what became of earlier
    drain suggestions (``models.drains``); also returns the newest row per node and source and
    the drain outcomes written. When nothing a prediction reads changed since the last run
    with the same ``as_of``, model and settings, that run's prediction is reused
    (``app.run_cache``)."""
    with open_store(cfg.db, cfg.db_wait_s) as store:
        report = None
        if cfg.ingest_paths:
            if store.count("xid_catalog") == 0:
                store.load_xid_catalog(load_catalog())
            log.info("ingesting %s", cfg.ingest_paths)
            report = ingest_paths(
                store,
                cfg.ingest_paths,
                now=now,
                base_ctx=ingest_context(cfg),
                live_write_s=cfg.live_write_s,
            )
            log.info("ingested %d files", len(report.files))
            if any(f.status in ("ok", "partial") for f in report.files):
                refresh(store)
        last_seen = source_last_seen(store)
        as_of = as_of or default_as_of(store)
        if as_of is None:
            raise ModelError("the database holds no events or telemetry yet: nothing to score")
        mark = data_mark(store)
        settings = run_cache.settings_key(cfg.scheduler, cfg.dashboard_url)
        version = str(card["model_version"])
        pred = run_cache.load(
            store, mark=mark, as_of=as_of, model_version=version, settings=settings
        )
        if pred is None:
            pred = _score(store, cfg, models_dir, card, as_of)
        drains = update_drain_outcomes(store, newest_data(store) or as_of)
        if not pred.reused:
            run_cache.save(store, pred, mark=mark, settings=settings, now=now)
    return report, pred, last_seen, drains


def _score(
    store: Store, cfg: RunConfig, models_dir: Path, card: dict[str, Any], as_of: datetime
) -> RunPrediction:
    """Load the model, score every node and GPU and write the run's ``predictions``."""
    from faultlens.models.predictor import predict_failures, save_predictions
    from faultlens.models.registry import load_model

    model = load_model(models_dir, str(card["model_version"]))
    pred = predict_failures(
        store,
        model.estimator,
        model.card,
        as_of=as_of,
        scheduler=cfg.scheduler,
        dashboard_url=cfg.dashboard_url,
    )
    log.info("writing predictions of %s (%d rows)", pred.run_id, pred.rows.height)
    save_predictions(store, pred, model.card["horizon_h"])
    log.info("predictions written")
    return RunPrediction(pred.run_id, pred.as_of, pred.model_version, pred.rows, pred.alerts)


def _logs_stopped(cfg: RunConfig, last_seen: pl.DataFrame, now: datetime) -> list[dict]:
    found = quiet_sources(last_seen, now=now, quiet_h=cfg.logs_quiet_h)
    if cfg.quiet_sources is not None:
        found = [q for q in found if q["node"] is not None or q["source"] in cfg.quiet_sources]
    for q in found:
        log.warning(
            "logs stopped: %s on %s since %s",
            q["source"],
            q["node"] or "every node",
            q["last_seen"],
        )
    return [{**q, "last_seen": q["last_seen"].isoformat()} for q in found]


def _alertmanager(
    cfg: RunConfig,
    paged: list[dict],
    run_id: str,
    version: str,
    horizon_h: float,
    now: datetime,
    stopped: list[dict] | None = None,
) -> tuple[am.Plan, str | None]:
    if not cfg.alertmanager_url:
        return am.Plan(), None
    state = am.load_state(cfg.alert_state)
    current = [
        (am.alert_labels(a), am.annotations(a, run_id, version, horizon_h, cfg.runbook_url))
        for a in paged
    ]
    current += [am.logs_stopped_alert(q, run_id, cfg.dashboard_url) for q in stopped or []]
    plan = am.reconcile(
        state,
        current,
        now=now,
        ttl=timedelta(hours=cfg.ttl_h),
        refresh_before=timedelta(hours=cfg.refresh_h),
    )
    try:
        session = build_session(
            cfg.alertmanager_http, environ=cfg.environ, where="alertmanager.http_config"
        )
        am.post_alerts(cfg.alertmanager_url, plan.payload, cfg.timeout_s, session=session)
    except am.DeliveryError as e:
        log.warning("%s", e)
        return am.Plan(unchanged=len(current)), str(e)
    am.remove_stale_temporaries(cfg.alert_state)
    log.info("writing alert state %s", cfg.alert_state)
    am.save_state(cfg.alert_state, plan.state)
    log.info("alert state written")
    return plan, None

"""Alert exporters of the scheduled job: a Prometheus textfile and Alertmanager's v2 API.

- ``write_textfile``: ``faultlens_risk_score`` per node and per GPU (plus run metadata) in the
  text exposition format, for node_exporter's textfile collector. Written to a temporary file in
  the same folder and renamed, so node_exporter never reads half a file.
- ``reconcile``: which alerts to POST this run. Alertmanager identifies an alert by its labels;
  we keep the alerts we sent in a small state file and send an alert when it is new, when its
  ``endsAt`` is about to lapse (refresh), and once more with ``endsAt = now`` when the risk has
  dropped (resolved). Running twice in a row sends each alert once.
"""

from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import requests

from faultlens.ingest.errors import FaultlensError
from faultlens.ingest.http_config import explain_status, request_error

log = logging.getLogger(__name__)

ALERT_NAME = "FaultlensFailureRisk"
SEVERITY = {"watch": "info", "drain_after_jobs": "warning", "drain_now": "critical"}


class DeliveryError(FaultlensError):
    """Alertmanager could not be reached or refused the alerts."""


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace('"', r"\"").replace("\n", r"\n")


def _labels(d: dict[str, str]) -> str:
    return ",".join(f'{k}="{_escape(str(v))}"' for k, v in d.items())


def textfile_lines(
    rows: pl.DataFrame,
    *,
    horizon_h: float,
    model_version: str,
    run_id: str,
    now: datetime,
    last_seen: pl.DataFrame | None = None,
) -> list[str]:
    """The exposition text; ``rows``: node, gpu (null on node rows), score, action;
    ``last_seen``: node, source, last_seen (the newest row per node and source)."""
    h = f"{horizon_h:g}"
    out = [
        "# HELP faultlens_risk_score Calibrated probability of a hardware failure within the "
        "horizon.",
        "# TYPE faultlens_risk_score gauge",
    ]
    for node, gpu, score in rows.select("node", "gpu", "score").iter_rows():
        labels = {"node": node, **({"gpu": gpu} if gpu is not None else {}), "horizon_h": h}
        out.append(f"faultlens_risk_score{{{_labels(labels)}}} {score:.6g}")
    out += [
        "# HELP faultlens_risk_action Suggested action for a node (1 = current).",
        "# TYPE faultlens_risk_action gauge",
    ]
    for node, action in (
        rows.filter(pl.col("gpu").is_null() & (pl.col("action") != "none"))
        .select("node", "action")
        .iter_rows()
    ):
        out.append(f"faultlens_risk_action{{{_labels({'node': node, 'action': action})}}} 1")
    if last_seen is not None and last_seen.height:
        out += [
            "# HELP faultlens_source_last_seen_timestamp_seconds Newest ingested row per node "
            "and source.",
            "# TYPE faultlens_source_last_seen_timestamp_seconds gauge",
        ]
        for node, source, ts in last_seen.select("node", "source", "last_seen").iter_rows():
            sec = (ts - datetime(1970, 1, 1)).total_seconds()
            labels = _labels({"node": node, "source": source})
            out.append(f"faultlens_source_last_seen_timestamp_seconds{{{labels}}} {sec:.0f}")
    epoch = (now - datetime(1970, 1, 1)).total_seconds()
    out += [
        "# HELP faultlens_last_run_timestamp_seconds When the last prediction run finished.",
        "# TYPE faultlens_last_run_timestamp_seconds gauge",
        f"faultlens_last_run_timestamp_seconds {epoch:.0f}",
        "# HELP faultlens_model_info The model that produced the scores.",
        "# TYPE faultlens_model_info gauge",
        f"faultlens_model_info{{{_labels({'model_version': model_version, 'run_id': run_id})}}} 1",
    ]
    return out


def _temp_prefix(path: Path) -> str:
    return f".{path.name}."


def write_textfile(path: Path, lines: list[str]) -> None:
    """Atomically replace ``path``: a hidden ``.tmp`` file in the same folder (which
    node_exporter, reading only ``*.prom``, never looks at), fsynced, then renamed over ``path``
    and the folder fsynced. Killed at any point, ``path`` is the old or the new complete file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(path), suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write("\n".join(lines) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def remove_stale_temporaries(path: Path) -> int:
    """Delete temporary files a killed writer of ``path`` left behind; call only while holding
    the lock that makes this process the only writer. Returns how many were removed."""
    path = Path(path)
    removed = 0
    for tmp in path.parent.glob(f"{glob.escape(_temp_prefix(path))}*.tmp"):
        tmp.unlink(missing_ok=True)
        removed += 1
    if removed:
        log.info("removed %d temporary files of %s left by a killed run", removed, path)
    return removed


# -- Alertmanager --


def _iso(ts: datetime) -> str:
    return ts.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def alert_labels(alert: dict[str, Any]) -> dict[str, str]:
    labels = {
        "alertname": ALERT_NAME,
        "node": alert["node"],
        "severity": SEVERITY.get(alert["action"], "info"),
        "source": "faultlens",
    }
    if alert.get("gpu") is not None:
        labels["gpu"] = str(alert["gpu"])
    return labels


def fingerprint(labels: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(labels, sort_keys=True).encode()).hexdigest()[:16]


XID_RUNBOOK_URL = "https://docs.nvidia.com/deploy/xid-errors/index.html"
LOGS_STOPPED = "FaultlensLogsStopped"


def annotations(
    alert: dict[str, Any],
    run_id: str,
    model_version: str,
    horizon_h: float,
    runbook_url: str = XID_RUNBOOK_URL,
) -> dict[str, str]:
    """Annotations of a risk alert: the reasons in words, the command with the node's current
    Slurm state, the evidence lines, the catalog's runbook action, links. ``generatorURL``
    (the node's dashboard page) travels in the ``_generator_url`` key, which ``reconcile``
    moves to the alert itself."""
    reasons = "; ".join(alert.get("reasons") or []) or "model score (no single driver)"
    state = alert.get("slurm_state")
    rb = alert.get("runbook")
    notes = {
        "summary": f"{alert['node']}: {alert['score']:.0%} risk of a hardware failure within "
        f"{horizon_h:g} h; suggested action {alert['action']}",
        "description": f"why: {reasons}",
        "command": alert.get("command") or "",
        "slurm_state": f"{state['state']} since {state['since']}" if state else "unknown",
        "evidence": ", ".join(ev["at"] for ev in alert.get("evidence") or []) or "-",
        "runbook": f"Xid {rb['xid']} ({rb['name']}): {rb['action']}. {rb['notes']}"
        if rb
        else "no catalogued Xid in the last 7 days",
        "runbook_url": runbook_url,
        "score": f"{alert['score']:.4f}",
        "run_id": run_id,
        "model_version": model_version,
    }
    if alert.get("dashboard_url"):
        notes["dashboard_url"] = alert["dashboard_url"]
        notes["_generator_url"] = alert["dashboard_url"]
    return notes


def logs_stopped_alert(
    quiet: dict[str, Any], run_id: str, dashboard_url: str | None = None
) -> tuple[dict[str, str], dict[str, str]]:
    """(labels, annotations) of a "logs stopped" alert: a source silent on the whole fleet
    (``node`` None) or on one node."""
    labels = {
        "alertname": LOGS_STOPPED,
        "source_kind": str(quiet["source"]),
        "severity": "warning",
        "source": "faultlens",
    }
    where = "every node" if quiet["node"] is None else quiet["node"]
    if quiet["node"] is not None:
        labels["node"] = str(quiet["node"])
    notes = {
        "summary": f"logs stopped: no {quiet['source']} data from {where} for "
        f"{quiet['age_h']:g} h (newest {quiet['last_seen']})",
        "description": "predictions for these nodes are as stale as their logs; check the "
        "collector / log shipping before trusting a quiet risk score",
        "run_id": run_id,
    }
    if dashboard_url:
        notes["runbook_url"] = f"{dashboard_url.rstrip('/')}/data-health"
        notes["_generator_url"] = notes["runbook_url"]
    return labels, notes


@dataclass
class Plan:
    new: list[dict] = field(default_factory=list)
    refreshed: list[dict] = field(default_factory=list)
    resolved: list[dict] = field(default_factory=list)
    unchanged: int = 0
    state: dict[str, dict] = field(default_factory=dict)

    @property
    def payload(self) -> list[dict]:
        return [*self.new, *self.refreshed, *self.resolved]


def reconcile(
    state: dict[str, dict],
    current: list[tuple[dict, dict]],
    *,
    now: datetime,
    ttl: timedelta,
    refresh_before: timedelta,
) -> Plan:
    """What to send, given the alerts sent before (``state``) and the current ones
    (``(labels, annotations)`` pairs). Pure: ``now`` is wall-clock time passed in."""
    plan = Plan()
    seen = set()
    for labels, notes in current:
        notes = dict(notes)
        url = notes.pop("_generator_url", None)
        extra = {"generatorURL": url} if url else {}
        fp = fingerprint(labels)
        seen.add(fp)
        prev = state.get(fp)
        if prev is None:
            entry = {"labels": labels, "startsAt": _iso(now), "endsAt": _iso(now + ttl)}
            plan.new.append({**entry, **extra, "annotations": notes})
        elif datetime.fromisoformat(prev["endsAt"].rstrip("Z")) - now < refresh_before:
            entry = {**prev, "endsAt": _iso(now + ttl)}
            plan.refreshed.append({**entry, **extra, "annotations": notes})
        else:
            entry = prev
            plan.unchanged += 1
        plan.state[fp] = {
            "labels": entry["labels"],
            "startsAt": entry["startsAt"],
            "endsAt": entry["endsAt"],
        }
    for fp, prev in state.items():
        if fp not in seen:
            plan.resolved.append(
                {
                    "labels": prev["labels"],
                    "startsAt": prev["startsAt"],
                    "endsAt": _iso(now),
                    "annotations": {"resolved": "risk dropped"},
                }
            )
    return plan


def load_state(path: Path) -> dict[str, dict]:
    try:
        return json.loads(Path(path).read_text()) if Path(path).is_file() else {}
    except (OSError, ValueError) as e:
        log.warning("alert state %s unreadable (%s): starting afresh", path, e)
        return {}


def save_state(path: Path, state: dict[str, dict]) -> None:
    write_textfile(path, [json.dumps(state, indent=1, sort_keys=True)])


def post_alerts(
    url: str, alerts: list[dict], timeout_s: float = 10.0, session: requests.Session | None = None
) -> None:
    """POST to ``<url>/api/v2/alerts``; raises ``DeliveryError`` on failure. ``session``: one
    from ``ingest.http_config.build_session`` (TLS, basic auth or a bearer token)."""
    if not alerts:
        return
    endpoint = url.rstrip("/") + "/api/v2/alerts"
    try:
        resp = (session or requests).post(endpoint, json=alerts, timeout=timeout_s)
    except requests.RequestException as e:
        raise DeliveryError(str(request_error("Alertmanager", endpoint, e))) from e
    if resp.status_code in (401, 403):
        hint = explain_status(resp.status_code, getattr(session, "http_config", None))
        raise DeliveryError(f"Alertmanager {endpoint} answered {resp.status_code}: {hint}")
    if resp.status_code >= 300:
        raise DeliveryError(
            f"Alertmanager {endpoint} answered {resp.status_code}: {resp.text[:200]}"
        )

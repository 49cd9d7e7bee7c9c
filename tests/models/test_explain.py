"""Alert reasons in words, evidence lines, runbook action and Slurm state (models/explain.py),
and the freshness of the data (models/freshness.py)."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import polars as pl
import pytest

from faultlens.ingest.catalog import load_catalog
from faultlens.ingest.store import Store
from faultlens.models.actions import RiskAction, command
from faultlens.models.explain import alert_context, is_quiet, reason_text, top_features
from faultlens.models.feature_catalog import FEATURES, HOURS_SINCE_CAP
from faultlens.models.freshness import (
    default_as_of,
    freshness_doc,
    quiet_sources,
    source_last_seen,
)
from tests.models.synthetic import insert_events

T = datetime(2025, 6, 1, 12)


@pytest.mark.parametrize(
    ("feature", "value", "text"),
    [
        ("xid48_24h", 3, "3 Xid 48 in 24 h"),
        ("xid63_7d", 2, "2 Xid 63 in 7 d"),
        ("xid74_w_72h", 4, "4 Xid 74 in 72 h"),
        ("ecc_sbe_inc_24h", 12, "12 new correctable ECC errors in 24 h"),
        ("pcie_7d", 5, "5 PCIe AER errors in 7 d"),
        ("fail_28d", 2, "2 earlier hardware failures in 28 d"),
        ("xid_memory_24h", 1, "1 memory Xid in 24 h"),
        ("xid_memory_24h", 2, "2 memory Xids in 24 h"),
        ("warn_24h", 1, "1 hardware warning in 24 h"),  # a count of one reads in the singular
        ("warn_24h", 3, "3 hardware warnings in 24 h"),
        ("warn_kinds_7d", 1, "1 kind of hardware warning in 7 d"),
        ("fail_28d", 1, "1 earlier hardware failure in 28 d"),
        ("hours_since_fail", 30.5, "last hardware failure 30.5 h ago"),
        ("temp_hot_24h", 11, "GPU temperature 11 C above 80 C in 24 h"),
        ("warn_streak_24h", 3, "3 hardware warnings on one GPU within 72 h, seen in the last 24 h"),
        ("warn_streak_72h", 1, "1 hardware warning on one GPU within 72 h, seen in the last 72 h"),
        (
            "warn_span_72h",
            30.25,
            "one GPU warning for 30.25 h (first to latest within 72 h), seen in the last 72 h",
        ),
    ],
)
def test_reason_text(feature: str, value: float, text: str) -> None:
    assert feature in FEATURES
    assert reason_text(feature, value) == text


def test_quiet_values_are_never_reasons() -> None:
    assert is_quiet("jobs_failed_7d", 0) and not is_quiet("jobs_failed_7d", 1)
    assert is_quiet("hours_since_fail", HOURS_SINCE_CAP) and not is_quiet("hours_since_fail", 5)
    j_zero, j_val, j_neg = (
        FEATURES.index("jobs_failed_7d"),
        FEATURES.index("xid48_24h"),
        FEATURES.index("ecc_24h"),
    )
    contrib = np.zeros((1, len(FEATURES) + 1))
    contrib[0, j_zero] = 0.8  # the largest contribution, but the value is 0
    contrib[0, j_val] = 0.5
    contrib[0, j_neg] = -0.3  # lowered the score: not a reason
    values = np.zeros((1, len(FEATURES)))
    values[0, j_val] = 3
    values[0, j_neg] = 2
    (feats,) = top_features(contrib, values)
    assert [f["feature"] for f in feats] == ["xid48_24h"]
    assert feats[0]["text"] == "3 Xid 48 in 24 h" and feats[0]["window_h"] == 24.0


def test_commands_drain_and_never_down() -> None:
    for action in (RiskAction.DRAIN_AFTER_JOBS, RiskAction.DRAIN_NOW):
        cmd = command("gpu007", action, "faultlens p=0.91: 3 Xid 48 in 24 h")
        assert cmd.startswith("scontrol update nodename=gpu007 state=drain reason=")
        assert "state=down" not in cmd


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "x.duckdb") as s:
        s.load_xid_catalog(load_catalog(None))
        yield s


def _ev(ts, node, kind, code=None, severity="warning", source="kernel", line=1):
    return {
        "ts": ts,
        "node": node,
        "source": source,
        "kind": kind,
        "code": code,
        "severity": severity,
        "file": f"/logs/{node}.log",
        "line": line,
    }


def test_alert_context_evidence_runbook_and_slurm_state(store) -> None:
    h = timedelta(hours=1)
    insert_events(
        store,
        [
            _ev(T - 30 * h, "gpu001", "xid", 63, line=10),
            _ev(T - 20 * h, "gpu001", "xid", 48, "critical", line=20),
            _ev(T - 10 * h, "gpu001", "xid", 13, line=30),
            _ev(T - 9 * 24 * h, "gpu001", "xid", 79, "critical", line=5),  # beyond 7 days
            _ev(T + h, "gpu001", "xid", 95, "critical", line=40),  # after as_of
            _ev(T - 40 * h, "gpu001", "node_drain", None, "warning", "slurm", 3),
            _ev(T - 5 * h, "gpu001", "node_resume", None, "info", "slurm", 4),
            _ev(T - 2 * h, "gpu002", "node_drain", None, "warning", "slurm", 7),
        ],
    )
    ctx = alert_context(store, ["gpu001", "gpu002", "gpu003"], T)
    one = ctx["gpu001"]
    assert [e["at"] for e in one["evidence"]] == [
        "/logs/gpu001.log:30",
        "/logs/gpu001.log:20",
        "/logs/gpu001.log:10",
        "/logs/gpu001.log:3",
    ]  # newest first, warning or worse, inside the week before as_of
    catalog = load_catalog(None).filter(pl.col("xid") == 48).row(0, named=True)
    assert one["runbook"]["xid"] == 48  # the most severe catalogued Xid of the week
    assert one["runbook"]["action"] == catalog["typical_action"]
    assert one["slurm_state"]["state"] == "RESUMED"
    assert ctx["gpu002"]["slurm_state"] == {
        "state": "DRAIN",
        "since": (T - 2 * h).isoformat(),
    }
    assert ctx["gpu003"] == {"evidence": [], "runbook": None, "slurm_state": None}


def test_slurm_state_from_the_summary_and_for_a_past_as_of(store) -> None:
    h = timedelta(hours=1)
    rows = [
        _ev(T - 40 * h, "gpu001", "node_drain", None, "warning", "slurm", 3),
        _ev(T - 5 * h, "gpu001", "node_resume", None, "info", "slurm", 4),
        _ev(T - 30 * h, "gpu002", "node_down", None, "error", "slurm", 5),
        _ev(T + 3 * h, "gpu002", "node_resume", None, "info", "slurm", 6),  # after as_of
        _ev(T - 20 * h, "gpu003", "xid", 63, line=7),  # no state event
    ]
    for r in rows:  # each file's rows with their summary, as ingest writes them
        store.insert_summarized("events", pl.DataFrame([r]), r["file"])
    assert store.summary_source() == "event_summary"
    ctx = alert_context(store, ["gpu001", "gpu002", "gpu003"], T)
    assert ctx["gpu001"]["slurm_state"] == {"state": "RESUMED", "since": (T - 5 * h).isoformat()}
    # gpu002's newest state is after as_of: its state then is read from events
    assert ctx["gpu002"]["slurm_state"] == {"state": "DOWN", "since": (T - 30 * h).isoformat()}
    assert ctx["gpu003"]["slurm_state"] is None
    later = alert_context(store, ["gpu002"], T + 4 * h)
    assert later["gpu002"]["slurm_state"]["state"] == "RESUMED"


def test_last_seen_and_logs_stopped(store) -> None:
    h = timedelta(hours=1)
    insert_events(
        store,
        [
            _ev(T - 50 * h, "gpu001", "xid", 63),
            _ev(T - 2 * h, "gpu002", "xid", 63),
            _ev(T - 30 * h, "gpu001", "node_drain", None, "warning", "slurm"),
        ],
    )
    store.insert(
        "telemetry",
        pl.DataFrame(
            {
                "ts": [T - 20 * h, T - h],
                "node": ["gpu001", "gpu002"],
                "gpu": [0, 0],
                "metric": ["DCGM_FI_DEV_GPU_TEMP"] * 2,
                "value": [60.0, 61.0],
            }
        ),
    )
    seen = source_last_seen(store)
    assert seen.filter(pl.col("node") == "gpu001").sort("source").rows() == [
        ("gpu001", "kernel", T - 50 * h),
        ("gpu001", "slurm", T - 30 * h),
        ("gpu001", "telemetry", T - 20 * h),
    ]
    assert default_as_of(store) == T - h + timedelta(seconds=1)
    found = quiet_sources(seen, now=T, quiet_h=6)
    # slurm is quiet on the whole fleet; gpu001's telemetry stopped while gpu002's goes on;
    # gpu001's quiet kernel log is normal (events are rare) and raises nothing
    assert [(q["node"], q["source"]) for q in found] == [(None, "slurm"), ("gpu001", "telemetry")]
    assert found[1]["age_h"] == 20.0
    later = quiet_sources(seen, now=T + 10 * h, quiet_h=6)
    assert {(q["node"], q["source"]) for q in later} == {
        (None, "kernel"),
        (None, "slurm"),
        (None, "telemetry"),
    }


def test_every_feature_has_words() -> None:
    # No feature falls back to its column name (NODE_FAIL is Slurm's own word).
    raw = [f for f in FEATURES if "_" in reason_text(f, 2).replace("NODE_FAIL", "")]
    assert raw == []


def test_status_shows_the_age_of_the_newest_row(tmp_path) -> None:
    import json

    from typer.testing import CliRunner

    from faultlens.app.cli import app

    db = tmp_path / "s.duckdb"
    with Store(db) as s:
        insert_events(
            s, [_ev(T - timedelta(hours=50), "gpu001", "xid", 63), _ev(T, "gpu002", "xid", 63)]
        )
        doc = freshness_doc(source_last_seen(s), T + timedelta(hours=2))
    (kernel,) = doc["by_source"]
    assert (kernel["nodes"], kernel["newest_age_h"], kernel["stalest_age_h"]) == (2, 2.0, 52.0)
    assert [(r["node"], r["age_h"]) for r in doc["by_node"]] == [("gpu001", 52.0), ("gpu002", 2.0)]
    res = CliRunner().invoke(app, ["status", "--db", str(db), "--json"])
    assert res.exit_code == 0, res.stderr
    seen = json.loads(res.stdout)["last_seen"]
    assert seen["by_source"][0]["newest"] == T.isoformat()
    assert seen["by_node"][0]["node"] == "gpu001"  # the stalest first
    table = CliRunner().invoke(app, ["status", "--db", str(db)])
    assert "newest row per source" in table.stdout

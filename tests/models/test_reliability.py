"""Reliability statistics on hand-made timelines whose answers follow from their constants."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

import numpy as np
import pytest

from faultlens.ingest.base import ParseContext
from faultlens.ingest.pipeline import ingest_paths
from faultlens.models.fleet import fleet, with_override
from faultlens.models.reliability import (
    failure_rate,
    fit_weibull,
    kaplan_meier,
    lemon_share,
    reliability,
)

T0 = datetime(2024, 1, 1)
SYSTEM_NODES = 20
DAYS = 100
# (node number, start day, repair h, level)
RECORDS = [
    (1, 5, 2.0, "Hardware"),
    (1, 6, 4.0, "Hardware"),
    (2, 40, 10.0, "Software"),
    (1, 70, 1.0, "Hardware"),
    (3, 99, 30.0, "Network"),
]


@pytest.fixture
def ticket_store(store, tmp_path):
    rows = ["system,nodes,nodenum,start,end,level"]
    rows.append(
        f"9,{SYSTEM_NODES},0,{T0.isoformat()},{(T0 + timedelta(hours=1)).isoformat()},Maintenance"
    )
    for node, day, rep, level in RECORDS:
        start = T0 + timedelta(days=day)
        rows.append(
            f"9,{SYSTEM_NODES},{node},{start.isoformat()},"
            f"{(start + timedelta(hours=rep)).isoformat()},{level}"
        )
    path = tmp_path / "t.csv"
    path.write_text("\n".join(rows) + "\n")
    ingest_paths(
        store, [str(path)], now=T0, base_ctx=ParseContext(file="", options={"dataset": "d"})
    )
    return store


def test_rate_mtbf_and_categories_follow_the_records(ticket_store) -> None:
    window = (T0, T0 + timedelta(days=DAYS))
    rel = reliability(ticket_store, "d", window)
    doc = rel.to_json()
    assert doc["nodes"] == SYSTEM_NODES
    assert doc["node_days"] == pytest.approx(SYSTEM_NODES * DAYS)
    assert doc["incidents"] == len(RECORDS)  # planned maintenance is not a failure
    assert doc["failures_per_1000_node_days"] == pytest.approx(
        len(RECORDS) * 1000 / (SYSTEM_NODES * DAYS), rel=1e-4
    )
    assert doc["mtbf_h"] == pytest.approx(SYSTEM_NODES * DAYS * 24 / len(RECORDS), rel=1e-4)
    hw = next(r for r in doc["by_category"] if r["level"] == "Hardware")
    assert hw["count"] == 3 and hw["mttr_h"] == pytest.approx((2 + 4 + 1) / 3, rel=1e-3)
    reps = sorted(r[2] for r in RECORDS)
    assert doc["repair_h"]["median"] == pytest.approx(reps[2])
    assert doc["repair_h"]["mean"] == pytest.approx(sum(reps) / len(reps), rel=1e-3)
    # worst 1.5% of 20 nodes = 1 node (node 1 with 3 of 5)
    assert doc["lemon_share"] == pytest.approx(3 / 5)


def test_fleet_override(ticket_store) -> None:
    window = (T0, T0 + timedelta(days=DAYS))
    base = fleet(ticket_store, "d", window)
    big = with_override(base, fleet_gpus=64, gpus_per_node=4)
    assert (big.nodes, big.gpus, big.source) == (16, 64, "override")
    assert big.node_days == pytest.approx(16 * DAYS)


def test_weibull_recovers_a_known_shape() -> None:
    rng = np.random.default_rng(3)
    shape, scale = 0.7, 50.0
    x = scale * rng.weibull(shape, 4000)
    fit = fit_weibull(x)
    assert fit is not None
    assert fit.shape_ci[0] < shape < fit.shape_ci[1]
    assert fit.scale == pytest.approx(scale, rel=0.1)
    assert fit.exponential_aic_delta > 0
    expo = fit_weibull(rng.exponential(10.0, 4000))
    assert expo is not None and expo.shape_ci[0] < 1.0 < expo.shape_ci[1]


def test_kaplan_meier_by_hand() -> None:
    # lifetimes 1, 2+, 3, 4+ (+ = censored): S(1) = 3/4, S(3) = 3/4 * 1/2
    km = kaplan_meier(np.array([1.0, 2.0, 3.0, 4.0]), np.array([True, False, True, False]))
    at = dict(zip(km["time_h"].to_list(), km["survival"].to_list(), strict=True))
    assert at[1.0] == pytest.approx(0.75)
    assert at[3.0] == pytest.approx(0.375)


def test_small_helpers() -> None:
    assert failure_rate(3, 1500.0) == pytest.approx(2.0)
    assert math.isnan(failure_rate(1, 0.0))
    import polars as pl

    frame = pl.DataFrame({"node": ["a"] * 5 + ["b", "c", "d", "e", "f"]})
    assert lemon_share(frame, 100) == pytest.approx(0.5 + 0.1)  # 2 worst nodes: a and one of 1


def test_another_datasets_kernel_log_is_no_failure_of_the_site(store, tmp_path) -> None:
    """The same Xid 79 line in a site file and in a file ingested with ``--dataset other``: only
    the site's counts among the site's failures (and the other dataset's own rate has none)."""
    from faultlens.ingest.schema import SITE_DATASET
    from faultlens.models.reliability import failures

    t = datetime(2026, 3, 2, 10, 0, 0)
    line = (
        "{stamp} {node} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, "
        "GPU has fallen off the bus.\n"
    )
    site = tmp_path / "site" / "kern.log"
    other = tmp_path / "other" / "kern.log"
    for path, node in ((site, "site-node-1"), (other, "public-node-7")):
        path.parent.mkdir()
        path.write_text(line.format(stamp=t.strftime("%Y-%m-%dT%H:%M:%S+00:00"), node=node))
    ingest_paths(store, [str(site)], now=t)
    ingest_paths(
        store, [str(other)], now=t, base_ctx=ParseContext(file="", options={"dataset": "other"})
    )
    window = (t - timedelta(days=1), t + timedelta(days=1))
    assert failures(store, SITE_DATASET, *window)["node"].to_list() == ["site-node-1"]
    assert failures(store, "other", *window).height == 0

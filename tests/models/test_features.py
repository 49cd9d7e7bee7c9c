"""Features and target on hand-written timelines: windows, no look-ahead, labels, GPU rows."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import polars as pl
import pytest

from faultlens.models.feature_catalog import FEATURES, HOURS_SINCE_CAP, TEMP_NORMAL_C
from faultlens.models.features import FeatureGrid, point_features
from faultlens.models.target import failure_episodes
from tests.models.synthetic import T0, insert_events, insert_gpus, random_cluster

H = timedelta(hours=1)
# One node's day: a correctable-ECC Xid 92 on GPU 3 (logged by PCI id), an NCCL error that names
# no GPU, then the GPU falls off the bus (Xid 79) and Slurm marks the node down for it.
XID92_AT = T0 + timedelta(hours=2, minutes=30)
NCCL_AT = T0 + timedelta(hours=5)
XID79_AT = T0 + timedelta(hours=10, minutes=10)
DOWN_AT = XID79_AT + timedelta(minutes=6)
END = T0 + timedelta(hours=48)
TIMELINE = [
    {
        "ts": XID92_AT,
        "node": "n1",
        "gpu": "0000:1b:00.0",
        "kind": "xid",
        "code": 92,
        "severity": "info",
    },
    {"ts": NCCL_AT, "node": "n1", "kind": "nccl_error", "severity": "error", "source": "nccl"},
    {
        "ts": XID79_AT,
        "node": "n1",
        "gpu": "0000:1b:00.0",
        "kind": "xid",
        "code": 79,
        "severity": "critical",
    },
    {
        "ts": DOWN_AT,
        "node": "n1",
        "kind": "node_down",
        "message": "Reason=GPU fell off the bus",
        "severity": "critical",
        "source": "slurm",
    },
    {
        "ts": T0 + timedelta(hours=1),
        "node": "n2",
        "gpu": "0",
        "kind": "xid",
        "code": 13,
        "severity": "warning",
    },
    {"ts": END - timedelta(minutes=1), "node": "n2", "kind": "nccl_warn", "severity": "info"},
]


@pytest.fixture
def timeline(store):
    insert_gpus(store, ["n1", "n2"])  # GPU 3 of n1 is PCI 0000:1b:00.0
    insert_events(store, TIMELINE)
    return store


def _hours(ts) -> int:
    return int((ts - T0) / H)


def _grid_rows(store, hours: list[int]) -> pl.DataFrame:
    grid = FeatureGrid(store, T0, END, horizon_h=24)
    mask = np.zeros(grid.shape, dtype=bool)
    mask[:, hours] = True
    return grid.table({"rows": mask})["rows"].filter(pl.col("node") == "n1").sort("ts")


def test_episode_merges_the_xid_and_the_down_event(timeline) -> None:
    ep = failure_episodes(timeline, T0, END)
    assert ep.select("node", "ts", "gpu", "cause", "n_events").to_dicts() == [
        {"node": "n1", "ts": XID79_AT, "gpu": "3", "cause": "xid79", "n_events": 2}
    ]


def test_windows_see_only_the_past(timeline) -> None:
    seen = _hours(XID92_AT) + 1  # the first row after the bucket holding the Xid 92
    rows = _grid_rows(timeline, [seen - 1, seen, seen + 23, seen + 24])
    assert rows["ts"].to_list() == [T0 + h * H for h in (seen - 1, seen, seen + 23, seen + 24)]
    assert rows["xid92_24h"].to_list() == [0, 1, 1, 0]
    assert rows["xid_all_1h"].to_list() == [0, 1, 0, 0]
    assert rows["xid_memory_7d"].to_list() == [0, 1, 1, 1]  # Xid 92: memory category
    assert rows["xid_hardware_7d"].to_list() == [0, 0, 1, 1]  # Xid 79 at 10:10: hardware


def test_labels_and_time_since_failure(timeline) -> None:
    fail_h = _hours(XID79_AT)  # the bucket [10 h, 11 h) holds the failure
    rows = _grid_rows(timeline, [0, fail_h, fail_h + 1, fail_h + 3])
    assert rows["label"].to_list() == [1, 1, 0, 0]
    assert rows["hours_since_fail"].to_list() == [HOURS_SINCE_CAP, HOURS_SINCE_CAP, 1.0, 3.0]
    assert rows["fail_24h"].to_list() == [0, 0, 1, 1]
    assert rows["xid_critical_24h"].to_list() == [0, 0, 1, 1]


def test_censored_rows_are_not_labelable(timeline) -> None:
    grid = FeatureGrid(timeline, T0, END, horizon_h=24)
    assert grid.shape == (2, 49)
    assert grid.labelable.sum() == 49 - 24


def test_gpu_rows_hold_their_own_and_node_wide_evidence(timeline) -> None:
    as_of = T0 + timedelta(hours=8)
    rows = point_features(timeline, as_of).filter(pl.col("node") == "n1")
    by_gpu = {r["gpu"]: r for r in rows.iter_rows(named=True)}
    assert set(by_gpu) == {None, *(str(g) for g in range(8))}
    assert by_gpu["3"]["xid92_24h"] == 1  # the PCI id resolved to index 3 via the inventory
    assert by_gpu["0"]["xid92_24h"] == 0
    assert by_gpu["0"]["nccl_error_24h"] == 1  # node-wide events count on every GPU
    assert by_gpu[None]["xid92_24h"] == 1 and by_gpu[None]["nccl_error_24h"] == 1


def test_telemetry_counters_become_increments(store) -> None:
    # ECC SBE counter of GPU 2: +5 over an hour, then a reset to 3 (counted as +3).
    values = [(0, 10.0), (1, 10.0), (2, 15.0), (3, 3.0)]
    store.insert(
        "telemetry",
        pl.DataFrame(
            {
                "ts": [T0 + h * H + timedelta(minutes=5) for h, _ in values],
                "node": ["n1"] * 4,
                "gpu": [2] * 4,
                "metric": ["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"] * 4,
                "value": [v for _, v in values],
            }
        ),
    )
    store.insert(
        "telemetry",
        pl.DataFrame(
            {  # the 99 C sample is outside the 24 h window
                "ts": [T0 - 30 * H, T0 + 2 * H, T0 + 3 * H],
                "node": ["n1"] * 3,
                "gpu": [2] * 3,
                "metric": ["DCGM_FI_DEV_GPU_TEMP"] * 3,
                "value": [99.0, 70.0, 90.0],
            }
        ),
    )
    rows = point_features(store, T0 + 4 * H).filter(pl.col("node") == "n1")
    gpu2 = rows.filter(pl.col("gpu") == "2").row(0, named=True)
    assert gpu2["ecc_sbe_inc_24h"] == 5 + 3
    assert gpu2["temp_hot_24h"] == 90.0 - TEMP_NORMAL_C  # degrees above normal
    assert gpu2["temp_hot_mean_24h"] == 0.0  # mean 80 C: not above normal
    assert gpu2["temp_hot_7d"] == 99.0 - TEMP_NORMAL_C
    assert gpu2["temp_hot_1h"] == 90.0 - TEMP_NORMAL_C  # the 90 C sample at 03:00
    grid = FeatureGrid(store, T0 - 48 * H, T0 + 4 * H, horizon_h=24)
    mask = np.zeros(grid.shape, dtype=bool)
    mask[:, -1] = True  # the row at T0 + 4 h
    from_grid = grid.table({"x": mask})["x"].row(0, named=True)
    node = rows.filter(pl.col("gpu").is_null()).row(0, named=True)
    telemetry = [f for f in FEATURES if f.startswith(("ecc_", "temp_", "throttle"))]
    assert {f: from_grid[f] for f in telemetry} == pytest.approx(
        {f: node[f] for f in telemetry}, nan_ok=True
    )


@pytest.mark.parametrize("hour", [200, 431, 700])
def test_grid_and_point_paths_agree(store, hour: int) -> None:
    truth = random_cluster(store, n_nodes=20, days=30, seed=11)
    grid = FeatureGrid(store, truth["start"], truth["end"], horizon_h=24)
    mask = np.zeros(grid.shape, dtype=bool)
    mask[:, hour] = True
    from_grid = grid.table({"x": mask})["x"].sort("node")
    as_of = truth["start"] + hour * H
    from_point = point_features(store, as_of).filter(pl.col("gpu").is_null()).sort("node")
    assert from_grid["node"].to_list() == from_point["node"].to_list()
    a = from_grid.select(FEATURES).to_numpy()
    b = from_point.select(FEATURES).to_numpy()
    mismatched = [
        f for j, f in enumerate(FEATURES) if not np.allclose(a[:, j], b[:, j], equal_nan=True)
    ]
    assert mismatched == []
    assert a[:, FEATURES.index("xid_all_28d")].sum() > 0  # the comparison saw real data


def test_kind_free_warning_features(timeline) -> None:
    # The Xid 92 (correctable ECC, a warning) at 02:30 is in bucket 2: seen from row 3.
    seen = _hours(XID92_AT) + 1
    rows = _grid_rows(timeline, [seen - 1, seen, seen + 6, seen + 24])
    assert rows["warn_kinds_7d"].to_list() == [0, 1, 1, 1]  # one kind (Xid 92) this week
    # 6 h rate minus the 18 h before: 1/6 while it is recent, -1/18 once it is older than 6 h
    assert rows["warn_escalation"].to_list() == pytest.approx([0, 1 / 6, -1 / 18, 0])


def test_monotone_constraints_cover_only_warning_evidence() -> None:
    from faultlens.models.feature_catalog import monotone_constraints

    cons = dict(zip(FEATURES, monotone_constraints(), strict=True))
    assert cons["warn_24h"] == cons["pcie_w_72h"] == cons["warn_kinds_7d"] == 1
    # counts that include failures themselves (after one, the node is drained) stay free
    assert cons["xid_all_24h"] == cons["fail_24h"] == cons["hours_since_fail"] == 0
    assert cons["ecc_24h"] == 0  # an uncorrectable ECC event is a target, not a warning


def test_a_subset_of_nodes_gives_the_same_rows_as_the_whole_grid(store) -> None:
    """``table`` computes windows over the selected nodes only (a cross-fitting group): the rows
    must be those of the same selection made beside a whole-grid one."""
    truth = random_cluster(store, n_nodes=20, days=30, seed=11)
    grid = FeatureGrid(store, truth["start"], truth["end"], horizon_h=24)
    rng = np.random.default_rng(3)
    pick = np.zeros(grid.shape, dtype=bool)
    pick[[1, 4, 5, 17]] = rng.random((4, grid.shape[1])) < 0.5
    alone = grid.table({"x": pick})["x"]
    beside = grid.table({"x": pick, "all": np.ones(grid.shape, dtype=bool)})["x"]
    assert alone.height == int(pick.sum()) > 100
    assert alone.equals(beside)
    assert alone["xid_all_28d"].sum() > 0
    assert alone["hours_since_fail"].min() < HOURS_SINCE_CAP  # some failure seen
    assert sorted(set(alone["node"])) == [grid.nodes[i] for i in (1, 4, 5, 17)]


def test_warning_streak_and_span_per_gpu(store) -> None:
    """A GPU that keeps warning for a day (Xid 119 at 01:00, 13:00, 31:30) against one whose two
    warnings come an hour apart, on the same node: the span is the first GPU's hours from its first
    warning to its latest within the 72 h before it."""

    def xid(hours: float, gpu: str, code: int = 119) -> dict:
        return {"ts": T0 + hours * H, "node": "n1", "gpu": gpu, "kind": "xid", "code": code}

    insert_gpus(store, ["n1"])
    insert_events(
        store,
        [xid(1, "0"), xid(13, "0"), xid(31.5, "0"), xid(20, "1", 92), xid(21, "1", 92)]
        + [xid(100, "0")],  # within its 72 h only the one at 31:30: 1:00 and 13:00 are older
    )
    end = T0 + 130 * H
    grid = FeatureGrid(store, T0, end, horizon_h=24)
    mask = np.zeros(grid.shape, dtype=bool)
    hours = [2, 14, 22, 32, 101]
    mask[:, hours] = True
    rows = grid.table({"rows": mask})["rows"].filter(pl.col("node") == "n1").sort("ts")
    # 02:00: one warning, no span; 14:00: two warnings 12 h apart; 22:00: GPU 1's two in one
    # hour do not beat GPU 0's 12 h; 32:00: GPU 0's three over 30.5 h
    # 101:00: the 72 h window holds 31:30 (three warnings, 30.5 h) and 100:00 (two: 31:30 and
    # itself, 68.5 h); the 24 h window only 100:00
    assert rows["warn_streak_72h"].to_list() == [1, 2, 2, 3, 3]
    assert rows["warn_span_72h"].to_list() == pytest.approx([0, 12, 12, 30.5, 68.5])
    assert rows["warn_streak_24h"].to_list() == [1, 2, 2, 3, 2]
    assert rows["warn_span_24h"].to_list() == pytest.approx([0, 12, 12, 30.5, 68.5])
    point = point_features(store, T0 + 32 * H).filter(pl.col("node") == "n1")
    gpu0 = point.filter(pl.col("gpu") == "0").row(0, named=True)
    gpu1 = point.filter(pl.col("gpu") == "1").row(0, named=True)
    assert (gpu0["warn_span_72h"], gpu1["warn_span_72h"]) == pytest.approx((30.5, 1.0))

"""Topology files and localizing network faults to a switch, rail, node or link."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from faultlens.ingest.errors import InputError
from faultlens.ingest.telemetry.topology import (
    TOPOLOGY_COLUMNS,
    load_topology,
    localize_network_faults,
    pair_cover,
)

DATA = Path(__file__).resolve().parents[2] / "data" / "topology"
T0 = datetime(2024, 5, 1, 12, 0, 0)
WINDOW = timedelta(minutes=5)
LEAF02 = ["gpu05", "gpu06", "gpu07", "gpu08"]
ALL16 = [f"gpu{i:02d}" for i in range(1, 17)]


def ev(
    node: str,
    kind: str,
    t_s: float,
    *,
    subkind: str | None = None,
    severity: str = "error",
    **attrs: object,
) -> dict:
    return {
        "ts": T0 + timedelta(seconds=t_s),
        "node": node,
        "kind": kind,
        "subkind": subkind,
        "severity": severity,
        "source": "test",
        "attrs": json.dumps(attrs) if attrs else None,
    }


def port_down(node: str, hca: str, t_s: float) -> dict:
    return ev(node, "ib_port", t_s, subkind="DOWN", severity="warning", device=hca, port=1)


def nccl_peer(node: str, peer: str, t_s: float) -> dict:
    return ev(node, "nccl_error", t_s, subkind="ib_completion", peer=peer, peer_port=40001)


def insert(store, rows: list[dict]) -> None:
    store.insert("events", pl.DataFrame(rows, infer_schema_length=None))


def top(result: pl.DataFrame, n: int = 1) -> list[tuple[str, str]]:
    return [(r["component_type"], r["component"]) for r in result.head(n).iter_rows(named=True)]


# -- loading ------------------------------------------------------------------------------------


def test_load_rail_optimized_yaml():
    topo = load_topology(DATA / "rail_optimized.yaml")
    assert topo.columns == list(TOPOLOGY_COLUMNS)
    assert topo.height == 16 * 8
    row = topo.filter(node="gpu06", hca="mlx5_3").row(0, named=True)
    assert (row["leaf_switch"], row["spine"], row["rail"]) == ("leaf02", "spine01", "rail3")


def test_load_fat_tree_csv_with_aliases_and_domains():
    topo = load_topology(DATA / "fat_tree.csv")
    assert topo.height == 12
    assert topo.filter(node="gpu10").row(0, named=True)["leaf_switch"] == "leaf04"
    assert topo.filter(ip="10.0.0.7")["node"].to_list() == ["gpu07"]
    assert topo["rail"].null_count() == 12


def test_load_rail_only_yaml():
    topo = load_topology(DATA / "rail_only.yaml")
    assert topo.height == 6
    assert topo["spine"].null_count() == 6
    assert topo.filter(node="gpu03", hca="mlx5_1")["rail"].to_list() == ["rail1"]
    assert topo.filter(node="gpu01", hca="mlx5_1")["leaf_switch"].to_list() == ["railsw1"]


def test_load_rejects_a_file_without_fabric_columns(tmp_path):
    with pytest.raises(InputError, match="leaf_switch or rail"):
        load_topology(DATA / "broken.csv")
    bad = tmp_path / "bad.yaml"
    bad.write_text("just a string")
    with pytest.raises(InputError):
        load_topology(bad)


def test_load_reads_synth_topology_csv(tmp_path):
    from faultlens.synth.cluster import Node
    from faultlens.synth.topology import write_topology

    nodes = [
        Node(
            name=f"gpu{i:04d}",
            index=i,
            gpus=[],
            leaf=f"leaf{i // 4 + 1:02d}",
            nic_pci=[f"0000:{b}:00.0" for b in ("19", "29")],
        )
        for i in range(8)
    ]
    topo = load_topology(write_topology(nodes, tmp_path))
    assert topo.height == 16
    row = topo.filter(node="gpu0005", hca="mlx5_1").row(0, named=True)
    assert (row["leaf_switch"], row["spine"], row["rail"], row["hca_pci"]) == (
        "leaf02",
        "spine01",
        "rail1",
        "0000:29:00.0",
    )


# -- localization with a topology ---------------------------------------------------------------


def test_leaf_switch_failure_is_localized_to_the_leaf(store):
    rows = [port_down(n, f"mlx5_{k}", 10 + k) for n in LEAF02 for k in range(8)]
    # peers elsewhere see their completions fail, and every rank of the job times out
    rows += [nccl_peer(o, n, 30) for o in ("gpu01", "gpu09", "gpu13") for n in LEAF02]
    rows += [ev(n, "nccl_timeout", 120, subkind="watchdog") for n in ALL16]
    insert(store, rows)
    result = localize_network_faults(store, load_topology(DATA / "rail_optimized.yaml"), WINDOW)
    best = result.row(0, named=True)
    assert (best["component_type"], best["component"]) == ("leaf_switch", "leaf02")
    assert (best["nodes_affected"], best["nodes_total"], best["score"]) == (4, 4, 1.0)
    assert best["window_start"] == T0
    nodes = result.filter(component_type="node")
    assert nodes["score"].max() < best["score"]
    spine = result.filter(component="spine01").row(0, named=True)
    assert spine["score"] == pytest.approx(0.5)


def test_rail_failure_is_localized_to_the_rail(store):
    insert(store, [port_down(n, "mlx5_3", i) for i, n in enumerate(ALL16)])
    result = localize_network_faults(store, load_topology(DATA / "rail_optimized.yaml"), WINDOW)
    assert top(result) == [("rail", "rail3")]
    best = result.row(0, named=True)
    assert (best["nodes_affected"], best["nodes_total"], best["score"]) == (16, 16, 1.0)
    spine = result.filter(component_type="spine")["score"].max()
    assert spine < 0.2  # one rail of eight: not a spine


def test_single_bad_cable_is_localized_to_the_link(store):
    rows = [port_down("gpu10", "mlx5_2", t) for t in (0, 40, 80)]
    rows.append(ev("gpu10", "ib_port", 20, subkind="ACTIVE", severity="info", device="mlx5_2"))
    insert(store, rows)
    result = localize_network_faults(store, load_topology(DATA / "rail_optimized.yaml"), WINDOW)
    best = result.row(0, named=True)
    assert (best["component_type"], best["component"], best["score"]) == (
        "link",
        "gpu10:mlx5_2",
        1.0,
    )
    assert best["evidence_count"] == 3  # the ACTIVE (info) line is not evidence
    assert result.filter(component="leaf03")["score"][0] < 0.1


def test_nic_pci_maps_to_the_nic_and_windows_are_separate(store):
    topo = load_topology(DATA / "rail_only.yaml")
    insert(
        store,
        [
            ev("gpu01", "ib_port", 0, subkind="DOWN", severity="warning", nic_pci="0000:29:00.0"),
            ev("gpu02", "ib_port", 5, subkind="DOWN", severity="warning", nic_pci="0000:29:00.0"),
            ev("gpu02", "nvlink", 3600, subkind="Fatal"),
        ],
    )
    result = localize_network_faults(store, topo, WINDOW)
    first = result.filter(window_start=T0)
    # both nodes behind rail switch railsw1 report; rail1 also serves gpu03, which is quiet
    assert top(first, 2) == [("leaf_switch", "railsw1"), ("rail", "rail1")]
    assert first.head(2)["score"].to_list() == [1.0, pytest.approx(2 / 3, abs=1e-6)]
    assert first.filter(component="railsw1")["nodes_total"][0] == 2
    assert first.filter(component="railsw0").height == 0  # NIC 0 is fine
    later = result.filter(window_start=T0 + timedelta(hours=1))
    assert top(later) == [("node", "gpu02")]


def test_pair_only_leaf_failure_with_ip_peers(store):
    topo = load_topology(DATA / "fat_tree.csv")
    ip = {f"gpu{i:02d}": f"10.0.0.{i}" for i in range(1, 13)}
    leaf02, others = ["gpu04", "gpu05", "gpu06"], ["gpu01", "gpu07", "gpu10", "gpu12"]
    rows = [nccl_peer(o, ip[n], 1) for o in others for n in leaf02]
    rows += [nccl_peer(n, ip[o], 2) for n in leaf02 for o in others]
    insert(store, rows)
    result = localize_network_faults(store, topo, WINDOW)
    assert top(result) == [("leaf_switch", "leaf02")]
    assert result.row(0, named=True)["nodes_affected"] == 3


# -- localization without a topology: NCCL peer pairs ---------------------------------------------


def test_without_topology_one_failing_pair_is_the_link(store):
    insert(
        store,
        [
            nccl_peer("gpu03", "gpu07", 0),
            nccl_peer("gpu07", "gpu03", 1),
            nccl_peer("gpu03", "gpu07", 70),
        ],
    )
    result = localize_network_faults(store, None, WINDOW)
    best = result.row(0, named=True)
    assert (best["component_type"], best["component"], best["score"]) == (
        "link",
        "gpu03<->gpu07",
        1.0,
    )
    assert best["evidence_count"] == 3
    assert result.filter(component_type="node")["score"].to_list() == [0.5, 0.5]


def test_without_topology_a_node_failing_with_many_partners_is_the_node(store):
    insert(
        store,
        [
            nccl_peer(r, "gpu09.cluster.local", i)
            for i, r in enumerate(["gpu01", "gpu02", "gpu03", "gpu04", "gpu05"])
        ],
    )
    result = localize_network_faults(store, None, WINDOW)
    best = result.row(0, named=True)
    assert (best["component_type"], best["component"]) == ("node", "gpu09")
    assert best["score"] == pytest.approx(5 / 6)
    assert best["evidence_count"] == 5
    assert result.filter(component_type="link")["score"].max() == pytest.approx(0.2)


def test_without_topology_addresses_resolve_ip_peers(store):
    insert(store, [nccl_peer("gpu03", "10.0.0.7", 0), nccl_peer("gpu07", "10.0.0.3", 1)])
    addresses = {"10.0.0.7": "gpu07", "10.0.0.3": "gpu03"}
    result = localize_network_faults(store, None, WINDOW, addresses=addresses)
    assert top(result) == [("link", "gpu03<->gpu07")]
    assert result.row(0, named=True)["evidence_count"] == 2


def test_no_evidence_gives_an_empty_frame(store):
    insert(store, [ev("gpu01", "xid", 0, code=79)])
    result = localize_network_faults(store, None, WINDOW)
    assert result.height == 0
    assert result.columns == [
        "window_start",
        "component_type",
        "component",
        "nodes_affected",
        "nodes_total",
        "score",
        "evidence_count",
    ]
    with pytest.raises(InputError):
        localize_network_faults(store, None, timedelta(0))


def test_pair_cover():
    assert pair_cover([("a", "b")]) == {"a", "b"}
    assert pair_cover([("a", "x"), ("b", "x"), ("c", "x")]) == {"x"}
    assert pair_cover([]) == set()


def test_events_without_timestamp_take_their_jobs_end(store):
    end = T0 + timedelta(minutes=42)
    store.insert("jobs", pl.DataFrame({"job_id": ["77"], "end": [end], "state": ["FAILED"]}))
    row = nccl_peer("gpu01", "gpu02", 0)
    insert(
        store,
        [
            {**row, "ts": None, "job_id": "77"},
            {**nccl_peer("gpu03", "gpu04", 0), "ts": None, "job_id": "unknown"},
        ],
    )
    result = localize_network_faults(store, None, WINDOW)
    assert set(result["window_start"]) == {T0 + timedelta(minutes=40)}
    assert top(result) == [("link", "gpu01<->gpu02")]

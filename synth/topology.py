"""The fabric: which leaf switch, spine and rail each node's HCAs hang off (``topology.csv``).

Rail-optimized fat tree as on HGX clusters: ``nodes_per_leaf`` nodes share a leaf group (a
leaf-switch failure takes all of them down), leaves pair up under spines, and HCA ``mlx5_k`` of
every node is on rail ``k``. One row per node and HCA: ``node,leaf_switch,spine,rail,hca,hca_pci``.
"""

from __future__ import annotations

from pathlib import Path

from faultlens.synth.cluster import Node

LEAVES_PER_SPINE = 4


def spine_of(leaf: str) -> str:
    return f"spine{(int(leaf[4:]) - 1) // LEAVES_PER_SPINE + 1:02d}"


def topology_csv(nodes: list[Node]) -> str:
    rows = ["node,leaf_switch,spine,rail,hca,hca_pci"]
    for nd in nodes:
        spine = spine_of(nd.leaf)
        for k, pci in enumerate(nd.nic_pci):
            rows.append(f"{nd.name},{nd.leaf},{spine},rail{k},mlx5_{k},{pci}")
    return "\n".join(rows) + "\n"


def write_topology(nodes: list[Node], out: Path) -> Path:
    path = out / "topology.csv"
    path.write_text(topology_csv(nodes))
    return path

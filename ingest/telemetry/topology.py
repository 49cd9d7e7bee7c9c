"""The network fabric (which leaf switch, spine and rail each node's NICs hang off), and
localizing network faults on it.

**Topology file** (optional; CSV or YAML), one row per node, or per node and NIC:

- CSV: ``node,leaf_switch,spine,rail,hca,hca_pci,ip,gpu`` -- only ``node`` and one of
  ``leaf_switch`` / ``rail`` are required (aliases: host/hostname, leaf/switch, nic/device,
  nic_pci). ``synth``'s ``topology.csv`` (``node,leaf_switch,spine,rail,hca,hca_pci``) is this.
  Rail-optimized fabrics give one row per NIC (``rail`` = the NIC's rail, ``leaf_switch`` = the
  switch that NIC is cabled to); rail-only fabrics leave ``spine`` empty; a plain fat tree leaves
  ``rail`` / ``hca`` empty. ``ip`` lets NCCL's ``peer 10.1.0.7<port>`` name a node.
- YAML: a list of node records, or ``{nodes: [records] | {name: record}}``, or
  ``{leaves: {leaf: {spine: s, nodes: [..]} | [..]}}``. A record is ``{node, leaf_switch, spine,
  ip, nics: [{hca, rail, hca_pci, leaf_switch}] | rails: {hca: rail}}``; a top-level
  ``rails: {rail: hca}`` gives every node without its own NIC list the same rails.

**Localization** (``localize_network_faults``): network evidence events are grouped into windows.
Evidence is *local* (``ib_port`` down, ``nvlink``, ``sxid``: the node's own hardware says so),
*pair* (``nccl_error`` naming a ``peer``: the path between two nodes failed), or *symptom*
(``nccl_timeout``, ``nccl_error`` without a peer). The affected nodes of a window are those with
local evidence, plus the nodes that explain the failing pairs local evidence does not explain
(greedily, the node in most pairs first; a pair failing on its own contributes both ends);
symptoms count only in a window with nothing else. Then, per component:

- ``leaf_switch`` / ``spine`` / ``rail``: share of its nodes affected x concentration (share of
  the window's affected nodes that sit behind it). A switch carrying all of a node's rails is
  further weighted by the share of its rails that carry NIC-level evidence, so that one rail
  failing everywhere points at the rail, not at a spine that happens to serve the same nodes.
- ``node``: concentration x share of the node's NICs with evidence (1 for NIC-less evidence);
  ``link`` (``node:hca``, the cable from that NIC): concentration / NICs of the node with evidence.

Without a topology the same question is asked of NCCL peer pairs: a node in failing pairs with
many different partners is the suspect (``node``: its share of the window's failing pairs x
k/(k+1) for k partners), a pair failing alone points at the link between them (``link``
``a<->b``: its share of failing pairs).

``evidence_count`` counts the window's evidence events that involve the component's nodes (as
reporter, or as the peer a report names). Events without a timestamp take their job's end.
The result ranks suspects; it writes nothing (the caller decides what to show).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl

from faultlens.ingest.base import normalize_node, normalize_pci
from faultlens.ingest.errors import InputError
from faultlens.ingest.schema import Kind
from faultlens.ingest.store import Store

log = logging.getLogger(__name__)

TOPOLOGY_COLUMNS = ("node", "leaf_switch", "spine", "rail", "hca", "hca_pci", "ip", "gpu")
_ALIASES = {
    "host": "node",
    "hostname": "node",
    "name": "node",
    "leaf": "leaf_switch",
    "switch": "leaf_switch",
    "leafswitch": "leaf_switch",
    "tor": "leaf_switch",
    "nic": "hca",
    "device": "hca",
    "nic_pci": "hca_pci",
    "pci": "hca_pci",
    "address": "ip",
}
RESULT_SCHEMA = {
    "window_start": pl.Datetime("us"),
    "component_type": pl.String,
    "component": pl.String,
    "nodes_affected": pl.Int64,
    "nodes_total": pl.Int64,
    "score": pl.Float64,
    "evidence_count": pl.Int64,
}
LOCAL_KINDS = (Kind.IB_PORT, Kind.NVLINK, Kind.SXID)
FABRIC_LOCAL_KINDS = (Kind.IB_PORT,)  # local evidence that says something about the fabric
EVIDENCE_KINDS = (*LOCAL_KINDS, Kind.NCCL_ERROR, Kind.NCCL_TIMEOUT)
NON_NETWORK_NCCL = ("cuda",)  # nccl_error subkinds that are not network evidence


# -- loading ----------------------------------------------------------------------------------


def load_topology(path: str | Path) -> pl.DataFrame:
    """A topology file (CSV, or YAML by extension ``.yaml`` / ``.yml``) as a frame with
    ``TOPOLOGY_COLUMNS`` (strings; node names and PCI ids normalized)."""
    p = Path(path)
    try:
        if p.suffix.lower() in (".yaml", ".yml"):
            import yaml

            frame = _yaml_frame(yaml.safe_load(p.read_text()))
        else:
            frame = pl.read_csv(p, infer_schema=False, truncate_ragged_lines=True)
    except (OSError, ValueError, pl.exceptions.PolarsError) as e:
        raise InputError(f"cannot read topology {path}: {e}") from e
    except Exception as e:  # yaml.YAMLError without importing yaml at module level
        raise InputError(f"cannot read topology {path}: {e}") from e
    return conform_topology(frame, str(path))


def conform_topology(frame: pl.DataFrame, what: str = "topology") -> pl.DataFrame:
    renames = {}
    for col in frame.columns:
        key = col.strip().lower().replace(" ", "_")
        key = _ALIASES.get(key, key)
        if key in TOPOLOGY_COLUMNS and key not in renames.values():
            renames[col] = key
    frame = frame.select([pl.col(c).cast(pl.String).alias(k) for c, k in renames.items()])
    if "node" not in frame.columns or not ({"leaf_switch", "rail"} & set(frame.columns)):
        raise InputError(
            f"{what}: needs a node column and a leaf_switch or rail column "
            f"(got {', '.join(frame.columns) or 'none'})"
        )
    frame = frame.with_columns(
        [pl.lit(None, pl.String).alias(c) for c in TOPOLOGY_COLUMNS if c not in frame.columns]
    ).select(TOPOLOGY_COLUMNS)
    frame = frame.with_columns(
        pl.col(c).str.strip_chars().replace("", None) for c in TOPOLOGY_COLUMNS
    )
    frame = frame.with_columns(
        node=pl.col("node").map_elements(normalize_node, return_dtype=pl.String),
        hca_pci=pl.col("hca_pci").map_elements(normalize_pci, return_dtype=pl.String),
    )
    return frame.filter(pl.col("node").is_not_null()).unique(maintain_order=True)


def _yaml_frame(doc: Any) -> pl.DataFrame:
    records: list[dict[str, Any]] = []
    default_rails: dict[str, str] = {}
    if isinstance(doc, dict):
        rails = doc.get("rails")
        if isinstance(rails, dict):
            default_rails = {str(hca): str(rail) for rail, hca in rails.items()}
        nodes = doc.get("nodes")
        if isinstance(nodes, list):
            records += [r if isinstance(r, dict) else {"node": r} for r in nodes]
        elif isinstance(nodes, dict):
            records += [{"node": n, **(r or {})} for n, r in nodes.items()]
        leaves = doc.get("leaves", doc.get("leaf_switches"))
        if isinstance(leaves, dict):
            for leaf, spec in leaves.items():
                members = spec.get("nodes", []) if isinstance(spec, dict) else spec or []
                spine = spec.get("spine") if isinstance(spec, dict) else None
                records += [{"node": n, "leaf_switch": leaf, "spine": spine} for n in members]
    elif isinstance(doc, list):
        records = [r for r in doc if isinstance(r, dict)]
    else:
        raise ValueError("expected a list of nodes or a mapping with nodes/leaves")
    rows = [row for rec in records for row in _expand_record(rec, default_rails)]
    return pl.DataFrame(rows, schema=dict.fromkeys(TOPOLOGY_COLUMNS, pl.String))


def _expand_record(rec: dict[str, Any], default_rails: dict[str, str]) -> list[dict[str, Any]]:
    base = {k: rec.get(k) for k in ("node", "leaf_switch", "spine", "rail", "ip")}
    for alias, key in _ALIASES.items():
        if base.get(key) is None and rec.get(alias) is not None:
            base[key] = rec[alias]
    nics = rec.get("nics") or rec.get("hcas")
    if isinstance(nics, list):
        rows = [
            {**base, **{k: v for k, v in nic.items() if v is not None}}
            for nic in nics
            if isinstance(nic, dict)
        ]
    elif isinstance(rec.get("rails"), dict):
        rows = [{**base, "hca": hca, "rail": rail} for hca, rail in rec["rails"].items()]
    elif default_rails and base.get("rail") is None:
        rows = [{**base, "hca": hca, "rail": rail} for hca, rail in default_rails.items()]
    else:
        rows = [base]
    return [{k: None if r.get(k) is None else str(r[k]) for k in TOPOLOGY_COLUMNS} for r in rows]


# -- evidence ---------------------------------------------------------------------------------


def load_evidence(
    store: Store, since: datetime | None = None, until: datetime | None = None
) -> pl.DataFrame:
    """Network evidence events: ts, node, kind, subkind, peer, hca, nic_pci. An event without a
    timestamp (NCCL lines often have none) takes the end of its job, when the job is known."""
    kinds = [k.value for k in EVIDENCE_KINDS]
    marks = ", ".join("?" for _ in kinds)
    skip = ", ".join("?" for _ in NON_NETWORK_NCCL)
    return store.query(
        f"""
        WITH job_end AS (SELECT job_id, max("end") AS job_end FROM jobs GROUP BY job_id),
        ev AS (
            SELECT coalesce(e.ts, j.job_end) AS ts, e.node, e.kind, e.subkind,
                   json_extract_string(e.attrs, '$.peer') AS peer,
                   coalesce(json_extract_string(e.attrs, '$.device'),
                            json_extract_string(e.attrs, '$.hca')) AS hca,
                   json_extract_string(e.attrs, '$.nic_pci') AS nic_pci
            FROM events e LEFT JOIN job_end j ON e.ts IS NULL AND j.job_id = e.job_id
            WHERE e.node IS NOT NULL AND e.kind IN ({marks})
              AND coalesce(e.severity, '') <> 'info'
              AND NOT (e.kind = 'nccl_error' AND coalesce(e.subkind, '') IN ({skip}))
        )
        SELECT * FROM ev
        WHERE ts IS NOT NULL AND ts >= coalesce(?, TIMESTAMP '0001-01-01')
          AND ts < coalesce(?, TIMESTAMP '9999-12-31')
        ORDER BY ts
        """,
        [*kinds, *NON_NETWORK_NCCL, since, until],
    )


@dataclass
class _Window:
    """One window's evidence, reduced to sets."""

    local: dict[str, set[str | None]] = field(default_factory=lambda: defaultdict(set))
    fabric: set[str] = field(default_factory=set)  # nodes with local fabric evidence
    pairs: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    symptoms: set[str] = field(default_factory=set)
    count: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # events per node

    def affected(self, fabric_only: bool) -> set[str]:
        base = set(self.fabric if fabric_only else self.local)
        open_pairs = [p for p in self.pairs if p[0] not in self.local and p[1] not in self.local]
        return base | pair_cover(open_pairs) or set(self.symptoms)


def pair_cover(pairs: list[tuple[str, str]]) -> set[str]:
    """The nodes that explain a set of failing pairs: greedily the node in most uncovered pairs;
    pairs left whose ends fail with no one else contribute both ends (either may be at fault)."""
    left = set(pairs)
    cover: set[str] = set()
    while left:
        degree: dict[str, int] = defaultdict(int)
        for a, b in left:
            degree[a] += 1
            degree[b] += 1
        node, best = max(sorted(degree.items()), key=lambda kv: kv[1])
        if best < 2:
            cover |= {n for p in left for n in p}
            break
        cover.add(node)
        left = {p for p in left if node not in p}
    return cover


def _windows(
    evidence: pl.DataFrame,
    window: timedelta,
    addresses: dict[str, str],
    nic_of: dict[tuple[str, str], str],
) -> dict[datetime, _Window]:
    out: dict[datetime, _Window] = defaultdict(_Window)
    frame = evidence.with_columns(w=pl.col("ts").dt.truncate(window))
    for r in frame.iter_rows(named=True):
        win, node = out[r["w"]], r["node"]
        win.count[node] += 1
        if r["kind"] in LOCAL_KINDS:
            hca = r["hca"] or nic_of.get((node, normalize_pci(r["nic_pci"]) or ""))
            win.local[node].add(hca if r["kind"] in FABRIC_LOCAL_KINDS else None)
            if r["kind"] in FABRIC_LOCAL_KINDS:
                win.fabric.add(node)
        elif r["peer"]:
            peer = normalize_node(r["peer"]) or r["peer"]
            peer = addresses.get(peer, peer)
            if peer != node:
                pair = (node, peer) if node < peer else (peer, node)
                win.pairs[pair] += 1
                win.count[peer] += 1  # an event that involves the named peer too
        else:
            win.symptoms.add(node)
    return out


# -- scoring ----------------------------------------------------------------------------------


def _topology_maps(topo: pl.DataFrame) -> dict[str, Any]:
    # component -> node -> the node's NICs on it (None: the whole node, no NIC given)
    members: dict[tuple[str, str], dict[str, set[str | None]]] = defaultdict(
        lambda: defaultdict(set)
    )
    comp_rails: dict[tuple[str, str], set[str]] = defaultdict(set)
    node_rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in topo.iter_rows(named=True):
        node_rows[r["node"]].append(r)
        for ctype in ("leaf_switch", "spine", "rail"):
            if r[ctype]:
                members[(ctype, r[ctype])][r["node"]].add(r["hca"])
                if r["rail"]:
                    comp_rails[(ctype, r[ctype])].add(r["rail"])
    return {"members": members, "comp_rails": comp_rails, "node_rows": node_rows}


def _row(
    ws: datetime, ctype: str, comp: str, affected: int, total: int, score: float, evidence: int
) -> dict[str, Any]:
    return {
        "window_start": ws,
        "component_type": ctype,
        "component": comp,
        "nodes_affected": affected,
        "nodes_total": total,
        "score": round(score, 6),
        "evidence_count": evidence,
    }


def _behind(evidence_nics: set[str | None] | None, comp_nics: set[str | None]) -> bool:
    """Whether a node's evidence could come through a component it is attached to: evidence
    without a NIC (or a pair) always can; NIC evidence only through that NIC's component."""
    if not evidence_nics or None in evidence_nics or None in comp_nics:
        return True
    return bool(evidence_nics & comp_nics)


def _score_topology(ws: datetime, win: _Window, maps: dict[str, Any]) -> list[dict[str, Any]]:
    node_rows = maps["node_rows"]
    fabric = win.affected(fabric_only=True)
    everyone = win.affected(fabric_only=False)
    # rails that carry NIC-level evidence, per node
    ev_rails: dict[str, set[str]] = defaultdict(set)
    for node, hcas in win.local.items():
        for r in node_rows.get(node, []):
            if r["hca"] and r["hca"] in hcas and r["rail"]:
                ev_rails[node].add(r["rail"])
    rows = []
    for (ctype, comp), members in maps["members"].items():
        hit = {n for n in members if n in fabric and _behind(win.local.get(n), members[n])}
        if ctype == "rail":
            hit = {n for n in hit if comp in ev_rails.get(n, ())}
            pool = {n for n in fabric if ev_rails.get(n)} or fabric
        else:
            pool = fabric
        if not hit:
            continue
        score = len(hit) / len(members) * len(hit) / max(len(pool), 1)
        if ctype != "rail":
            rails = maps["comp_rails"].get((ctype, comp), set())
            seen = set().union(*(ev_rails.get(n, set()) for n in hit)) & rails
            if rails and seen:
                score *= len(seen) / len(rails)
        rows.append(
            _row(ws, ctype, comp, len(hit), len(members), score, sum(win.count[n] for n in hit))
        )
    for node in everyone:
        nics = [r for r in node_rows.get(node, []) if r["hca"]]
        hcas = {h for h in win.local.get(node, set()) if h}
        nic_less = None in win.local.get(node, {None}) or not hcas
        spread = 1.0 if nic_less or not nics else len(hcas) / len(nics)
        conc = 1.0 / len(everyone)
        rows.append(_row(ws, "node", node, 1, 1, conc * spread, win.count[node]))
        for hca in sorted(hcas):
            rows.append(_row(ws, "link", f"{node}:{hca}", 1, 1, conc / len(hcas), win.count[node]))
    return rows


def _score_pairs(ws: datetime, win: _Window) -> list[dict[str, Any]]:
    if not win.pairs:
        nodes = set(win.local) | win.symptoms
        return [_row(ws, "node", n, 1, 1, 1.0 / len(nodes), win.count[n]) for n in nodes]
    partners: dict[str, set[str]] = defaultdict(set)
    for a, b in win.pairs:
        partners[a].add(b)
        partners[b].add(a)
    n_pairs = len(win.pairs)
    rows = []
    for node, others in partners.items():
        k = len(others)
        evidence = sum(c for p, c in win.pairs.items() if node in p)
        rows.append(_row(ws, "node", node, 1, 1, k / n_pairs * k / (k + 1), evidence))
    for (a, b), count in win.pairs.items():
        rows.append(_row(ws, "link", f"{a}<->{b}", 2, 2, 1.0 / n_pairs, count))
    return rows


def localize_network_faults(
    store: Store,
    topology: pl.DataFrame | None,
    window: timedelta = timedelta(minutes=5),
    *,
    addresses: dict[str, str] | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> pl.DataFrame:
    """Rank the components (switch, rail, node, link) that best explain each window's network
    evidence; ``addresses`` maps peer IPs to node names (the topology's ``ip`` column adds to it).
    Columns: ``RESULT_SCHEMA``, sorted by window and score (highest first)."""
    if window <= timedelta(0):
        raise InputError("window must be positive")
    addr = {normalize_node(k) or k: normalize_node(v) or v for k, v in (addresses or {}).items()}
    nic_of: dict[tuple[str, str], str] = {}
    maps = None
    if topology is not None and topology.height:
        topology = conform_topology(topology)
        for r in topology.iter_rows(named=True):
            if r["ip"]:
                addr.setdefault(r["ip"], r["node"])
            if r["hca_pci"] and r["hca"]:
                nic_of[(r["node"], r["hca_pci"])] = r["hca"]
        maps = _topology_maps(topology)
    evidence = load_evidence(store, since, until)
    rows: list[dict[str, Any]] = []
    for ws, win in sorted(_windows(evidence, window, addr, nic_of).items()):
        rows += _score_topology(ws, win, maps) if maps else _score_pairs(ws, win)
    frame = pl.DataFrame(rows, schema=RESULT_SCHEMA)
    return frame.sort(
        ["window_start", "score", "evidence_count", "component_type", "component"],
        descending=[False, True, True, False, False],
    )

"""The fleet model: which nodes a dataset runs, with how many GPUs, over which days.

Node-days, failure rates, MTBF and replay scaling all come from here. A dataset's fleet is, best
source first:

1. ``nodes``: the fleet tables of its files (node lists, inventories, incident records; each node
   dated by its first and last sighting, so a node counts only the days it was there);
2. for the site's own history also the GPU inventory (``gpus``) and the Slurm jobs' node lists,
   and, beside either of these, the nodes that log events in the window (all counted over the
   whole window);
3. failing that, the nodes that had events (``source = "failing_nodes"``): the fleet is then
   *thin* - a lower bound - and every command says so (``Fleet.note``).

Files ingested with ``--dataset NAME`` (table ``dataset_files``) belong to that dataset and never
to the site's fleet; files not listed are the site's own (``SITE_DATASET``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, time, timedelta

import polars as pl

from faultlens.ingest.schema import SITE_DATASET
from faultlens.ingest.store import Store

log = logging.getLogger(__name__)

DEFAULT_GPUS_PER_NODE = 8
FLEET_SOURCES = ("nodes", "inventory", "failing_nodes", "override")


def file_filter(dataset: str, alias: str = "") -> tuple[str, list[object]]:
    """SQL predicate (and its parameters) keeping the rows of ``dataset``'s files."""
    col = f"{alias}.file" if alias else "file"
    if dataset == SITE_DATASET:
        return (f"({col} IS NULL OR {col} NOT IN (SELECT file FROM dataset_files))", [])
    return (f"{col} IN (SELECT file FROM dataset_files WHERE dataset = ?)", [dataset])


@dataclass(frozen=True)
class Fleet:
    dataset: str
    nodes: int
    gpus_per_node: int
    node_days: float
    source: str  # one of FLEET_SOURCES
    window: tuple[datetime, datetime]
    gpus_per_node_known: bool = True

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def thin(self) -> bool:
        return self.source == "failing_nodes"

    @property
    def note(self) -> str:
        """One line on where the fleet came from (and how it was scaled)."""
        gpn = f"{self.gpus_per_node} GPUs per node"
        if not self.gpus_per_node_known:
            gpn += " (assumed: no inventory says)"
        where = {
            "nodes": "from the fleet records (node lists, inventories, incident records)",
            "inventory": "from the GPU inventory, the jobs' node lists and the nodes that log",
            "failing_nodes": "inferred from failing nodes (a lower bound: no inventory)",
            "override": "as given on the command line",
        }[self.source]
        return f"fleet of {self.nodes:,} nodes {where}; {gpn}"

    def to_json(self) -> dict[str, object]:
        return {
            "fleet_nodes": self.nodes,
            "fleet_gpus": self.gpus,
            "gpus_per_node": self.gpus_per_node,
            "fleet_source": self.source,
            "node_days": round(self.node_days, 3),
        }


def data_window(store: Store, dataset: str) -> tuple[datetime, datetime] | None:
    """The span of a dataset's own records: events, incidents, node sightings, jobs."""
    where, params = file_filter(dataset)
    days = _node_days(store, dataset)
    events = (
        f"SELECT min(first_ts) AS lo, max(last_ts) AS hi FROM {days}"
        if days
        else f"SELECT min(ts) AS lo, max(ts) AS hi FROM events WHERE ts IS NOT NULL AND {where}"
    )
    row = store.query(
        f"SELECT min(lo) AS lo, max(hi) AS hi FROM ({events} "
        f'UNION ALL SELECT min(start), max(coalesce("end", start)) FROM incidents WHERE {where} '
        f"UNION ALL SELECT min(first_seen), max(last_seen) FROM nodes WHERE {where} "
        f'UNION ALL SELECT min(start), max("end") FROM jobs WHERE {where})',
        params * (3 if days else 4),
    ).row(0)
    if row[0] is None or row[1] is None:
        return None
    return row[0], row[1] + timedelta(seconds=1)  # the newest record inside the window


def _overlap_days(frame: pl.DataFrame, lo: datetime, hi: datetime) -> float:
    first = pl.col("first_seen").fill_null(lo).clip(lo, hi)
    last = pl.col("last_seen").fill_null(hi).clip(lo, hi)
    span = pl.when(pl.col("first_seen").is_null() | (pl.col("first_seen") == pl.col("last_seen")))
    days = span.then(pl.lit(hi - lo)).otherwise(last - first).dt.total_seconds() / 86400.0
    return float(frame.select(days.sum()).item() or 0.0)


def fleet(
    store: Store,
    dataset: str = SITE_DATASET,
    window: tuple[datetime, datetime] | None = None,
    *,
    gpus_per_node: int | None = None,
    nodes: Sequence[str] = (),
) -> Fleet:
    """The fleet of ``dataset`` over ``window`` (default: the dataset's own span); with ``nodes``
    only those nodes of it (a chosen node the fleet records do not name counts the whole
    window, as a node someone looked at is one the site runs)."""
    win = window or data_window(store, dataset) or (datetime(1970, 1, 1), datetime(1970, 1, 2))
    lo, hi = win
    where, params = file_filter(dataset)
    rows = store.query(
        "SELECT node, min(first_seen) AS first_seen, max(last_seen) AS last_seen, "
        f"median(gpus) AS gpus FROM nodes WHERE {where} AND dataset = ? "
        "AND (first_seen IS NULL OR first_seen < ?) AND (last_seen IS NULL OR last_seen >= ?) "
        "GROUP BY node",
        [*params, dataset, hi, lo],
    )
    source = "nodes"
    if dataset == SITE_DATASET:
        inv = _inventory(store)
        if inv.height:
            extra = inv.filter(~pl.col("node").is_in(rows["node"].implode()))
            rows = pl.concat([rows, extra], how="diagonal_relaxed")
            source = "nodes" if rows.height > extra.height else "inventory"
        if rows.height:  # a node that logs is one the site runs (not a fleet on its own)
            logging_nodes = _logging_nodes(store, SITE_DATASET, lo, hi)
            rows = pl.concat(
                [rows, logging_nodes.filter(~pl.col("node").is_in(rows["node"].implode()))],
                how="diagonal_relaxed",
            )
    if nodes:
        chosen = pl.DataFrame({"node": sorted(set(nodes))}, schema={"node": pl.String})
        source = source if rows.height else "failing_nodes"  # the fleet itself is unknown
        rows = chosen.join(rows, on="node", how="left")
    if rows.height == 0:
        rows = _logging_nodes(store, dataset, lo, hi)
        source = "failing_nodes"
    gpn, known = _gpus_per_node(rows, gpus_per_node)
    return Fleet(
        dataset=dataset,
        nodes=rows.height,
        gpus_per_node=gpn,
        node_days=_overlap_days(rows, lo, hi) if rows.height else 0.0,
        source=source,
        window=(lo, hi),
        gpus_per_node_known=known,
    )


def _logging_nodes(store: Store, dataset: str, lo: datetime, hi: datetime) -> pl.DataFrame:
    """The nodes with an event in the window, as fleet rows whose sightings and GPUs are unknown."""
    return _event_nodes(store, dataset, lo, hi).with_columns(
        pl.lit(None, pl.Datetime("us")).alias("first_seen"),
        pl.lit(None, pl.Datetime("us")).alias("last_seen"),
        pl.lit(None, pl.Float64).alias("gpus"),
    )


def _node_days(store: Store, dataset: str) -> str | None:
    """The per-day node counts a reader's view keeps (``store.node_day_table``, the rollup of
    ``ingest.rollups``) where they answer exactly for ``dataset``'s events: the site's own, and
    no file belongs to another dataset."""
    table = getattr(store, "node_day_table", None)
    if table is None or dataset != SITE_DATASET:
        return None
    return None if store.scalar("SELECT count(*) FROM dataset_files") else table


def _aligned(t: datetime) -> bool:
    return t == datetime.combine(t.date(), time())


def _event_nodes(store: Store, dataset: str, lo: datetime, hi: datetime) -> pl.DataFrame:
    """The nodes with an event of ``dataset`` in ``[lo, hi)`` (from the day counts when the
    window falls on whole days)."""
    days = _node_days(store, dataset)
    if days and _aligned(lo) and _aligned(hi):
        return store.query(
            f"SELECT DISTINCT node FROM {days} WHERE node IS NOT NULL AND day >= ? AND day < ?",
            [lo, hi],
        )
    where, params = file_filter(dataset)
    return store.query(
        "SELECT DISTINCT node FROM events WHERE node IS NOT NULL AND ts >= ? AND ts < ? "
        f"AND {where}",
        [lo, hi, *params],
    )


def _inventory(store: Store) -> pl.DataFrame:
    where, params = file_filter(SITE_DATASET)
    return store.query(
        "SELECT node, NULL::TIMESTAMP AS first_seen, NULL::TIMESTAMP AS last_seen, "
        "max(n)::DOUBLE AS gpus FROM ("
        f"SELECT node, count(DISTINCT gpu_index) AS n FROM gpus WHERE node IS NOT NULL AND {where} "
        "GROUP BY node UNION ALL "
        f"SELECT unnest(nodes) AS node, NULL AS n FROM jobs WHERE {where}) "
        "WHERE node IS NOT NULL GROUP BY node",
        params * 2,
    )


def _gpus_per_node(rows: pl.DataFrame, override: int | None) -> tuple[int, bool]:
    if override is not None:
        return int(override), True
    known = rows["gpus"].drop_nulls() if "gpus" in rows.columns else pl.Series([])
    known = known.filter(known > 0)
    if known.len():
        return max(1, round(float(known.median()))), True
    return DEFAULT_GPUS_PER_NODE, False


def with_override(
    base: Fleet, *, fleet_gpus: int | None = None, gpus_per_node: int | None = None
) -> Fleet:
    """``base`` resized by the command line's ``--fleet-gpus`` / ``--gpus-per-node``."""
    gpn = int(gpus_per_node) if gpus_per_node else base.gpus_per_node
    if fleet_gpus is None and gpus_per_node is None:
        return base
    nodes = max(1, -(-int(fleet_gpus) // gpn)) if fleet_gpus else base.nodes
    days = (base.window[1] - base.window[0]).total_seconds() / 86400.0
    return Fleet(
        dataset=base.dataset,
        nodes=nodes,
        gpus_per_node=gpn,
        node_days=nodes * days if fleet_gpus else base.node_days,
        source="override" if fleet_gpus else base.source,
        window=base.window,
        gpus_per_node_known=True,
    )

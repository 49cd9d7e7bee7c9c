"""The filters every page and report section share (time range, cluster, node, GPU, job), as SQL.

A cluster is the node name without its trailing number (``gpu017`` -> ``gpu``, ``dgx-b-04`` ->
``dgx-b``): the database has no cluster column, and fleets name nodes that way. Choosing clusters
narrows the node set; the SQL only ever sees the final list of nodes, so no regular expression runs
over the events table.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from typing import Any

_CLUSTER_RE = re.compile(r"[-_.]?\d+$")


def cluster_of(node: str) -> str:
    """``gpu017`` -> ``gpu``; a name without a trailing number is its own cluster."""
    stripped = _CLUSTER_RE.sub("", node)
    return stripped or node


def nodes_for(all_nodes: Sequence[str], clusters: Sequence[str], nodes: Sequence[str]) -> tuple:
    """The node set the filters select: chosen nodes, else every node of the chosen clusters."""
    if nodes:
        return tuple(sorted(nodes))
    if clusters:
        wanted = set(clusters)
        return tuple(n for n in all_nodes if cluster_of(n) in wanted)
    return ()


@dataclass(frozen=True)
class Filters:
    """``since`` inclusive, ``until`` exclusive; empty ``nodes`` means every node."""

    since: datetime | None = None
    until: datetime | None = None
    nodes: tuple[str, ...] = field(default_factory=tuple)
    gpu: str | None = None  # GPU index ("3") or PCI bus id ("0000:3b:00.0")
    job_id: str | None = None

    @property
    def span_days(self) -> float | None:
        if self.since is None or self.until is None:
            return None
        return max((self.until - self.since).total_seconds() / 86400.0, 0.0)

    def events_where(self, alias: str = "", ts: str = "ts") -> tuple[str, list[Any]]:
        """A WHERE body over ``events`` (or any table with ts/node/gpu/job_id) and its params."""
        a = f"{alias}." if alias else ""
        parts, params = self.time_where(f"{a}{ts}")
        if self.nodes:
            parts.append(f"{a}node IN (SELECT unnest(?::VARCHAR[]))")
            params.append(list(self.nodes))
        if self.gpu:
            if self.gpu.isdigit():
                parts.append(f"({a}gpu_index = ? OR {a}gpu = ?)")
                params += [int(self.gpu), self.gpu]
            else:
                parts.append(f"lower({a}gpu) = lower(?)")
                params.append(self.gpu)
        if self.job_id:
            parts.append(f"{a}job_id = ?")
            params.append(self.job_id)
        return _join(parts), params

    def time_where(self, col: str) -> tuple[list[str], list[Any]]:
        parts: list[str] = []
        params: list[Any] = []
        if self.since is not None:
            parts.append(f"{col} >= ?")
            params.append(self.since)
        if self.until is not None:
            parts.append(f"{col} < ?")
            params.append(self.until)
        return parts, params

    def jobs_where(self, alias: str = "") -> tuple[str, list[Any]]:
        """Jobs that overlap the time range, ran on a selected node, and match the job id."""
        a = f"{alias}." if alias else ""
        parts: list[str] = []
        params: list[Any] = []
        if self.since is not None:
            parts.append(f'coalesce({a}"end", {a}start, {a}submit) >= ?')
            params.append(self.since)
        if self.until is not None:
            parts.append(f"coalesce({a}start, {a}submit) < ?")
            params.append(self.until)
        if self.nodes:  # a semi-join on the unnested node lists (list_has_any is quadratic)
            parts.append(
                f"{a}job_id IN (SELECT job_id FROM (SELECT job_id, unnest(nodes) AS n "
                "FROM jobs) WHERE n IN (SELECT unnest(?::VARCHAR[])))"
            )
            params.append(list(self.nodes))
        if self.job_id:
            parts.append(f"{a}job_id = ?")
            params.append(self.job_id)
        return _join(parts), params

    def node_days(self, n_nodes_fleet: int) -> float:
        n = len(self.nodes) if self.nodes else n_nodes_fleet
        return n * (self.span_days or 0.0)


def facet_where(facets: dict[str, Any] | None, alias: str = "") -> tuple[list[str], list[Any]]:
    """Predicates (and their params) for the event explorer's facets: source / kind / severity
    lists and Xid codes, on columns of the table ``alias``."""
    a = f"{alias}." if alias else ""
    parts: list[str] = []
    params: list[Any] = []
    for col in ("source", "kind", "severity"):
        values = (facets or {}).get(col)
        if values:
            parts.append(f"{a}{col} IN (SELECT unnest(?::VARCHAR[]))")
            params.append([str(v) for v in values])
    codes = (facets or {}).get("code")
    if codes:
        parts.append(f"{a}code IN (SELECT unnest(?::INTEGER[]))")
        params.append([int(c) for c in codes])
    return parts, params


def _join(parts: list[str]) -> str:
    return " AND ".join(parts) if parts else "TRUE"


def default_days(lo: datetime, hi: datetime) -> tuple[date, date]:
    """The dashboard's default range in whole days: the data's own span, first day to last (a
    window cut back from the newest stamp would hide what happened before it)."""
    return lo.date(), hi.date()


def default_range(lo: datetime, hi: datetime) -> tuple[datetime, datetime]:
    """``default_days`` as [since, until) instants: until is the midnight after the last day."""
    start, end = default_days(lo, hi)
    return datetime.combine(start, time()), datetime.combine(end + timedelta(days=1), time())


def bucket_for(since: datetime | None, until: datetime | None) -> tuple[str, timedelta]:
    """A time bucket giving a readable number of bars for the range: hour, 6 h, day or week."""
    if since is None or until is None:
        return "1 day", timedelta(days=1)
    days = (until - since).total_seconds() / 86400.0
    if days <= 3:
        return "1 hour", timedelta(hours=1)
    if days <= 14:
        return "6 hours", timedelta(hours=6)
    if days <= 120:
        return "1 day", timedelta(days=1)
    return "7 days", timedelta(days=7)

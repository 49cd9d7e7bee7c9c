"""The dashboard's pages, one thin module each, and the one query cache they share.

``query(fn, *args)`` runs a ``reports`` query function on the current snapshot. Results are kept
per snapshot and arguments (the snapshot's memo, ``reports.snapshot.Memo``): a filter change that
returns to an earlier choice costs nothing, two sessions asking for the same result at once compute
it once, results are shared without being copied, and a new snapshot starts afresh. ``on_trace``
does the same for work on the range's interruption trace, which is read from the snapshot once.

``warm(snapshot)`` computes the slow results of every page's default view (the data's whole span, no
other filter) on a new snapshot before it is served, so a page's first render finds them ready,
then each page's view of each cluster.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from faultlens.app.dashboard import ui
from faultlens.reports.snapshot import Snapshot, call_key, trace_key

log = logging.getLogger(__name__)


def query(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return ui.snapshot().call(fn, *args, **kwargs)


def query_soon(
    fn: Callable[..., Any], *args: Any, wait_s: float = 0.3, **kwargs: Any
) -> tuple[bool, Any]:
    """``(True, query(fn, ...))`` if it is ready within ``wait_s``; else ``(False, None)`` while
    it is computed in the background (the same result ``query`` then finds): a slow panel of a
    first screen shows a placeholder instead of holding the whole page."""
    snap = ui.snapshot()
    return _soon(snap, call_key(fn, args, kwargs), lambda: fn(snap.store, *args, **kwargs), wait_s)


def _soon(snap: Snapshot, key: Any, compute: Callable[[], Any], wait_s: float) -> tuple[bool, Any]:
    """``compute`` once per ``key`` on ``snap``, in the background; its result if ready in time."""
    fut = snap.memo.submit(key, compute)
    try:
        return True, fut.result(timeout=wait_s)
    except TimeoutError:
        return False, None


def on_trace(
    fn: Callable[..., Any],
    since: datetime | None,
    until: datetime | None,
    *args: Any,
    **kwargs: Any,
) -> Any:
    """``fn(trace, *args, **kwargs)`` on the range's interruption trace (``replay.from_db``,
    shared by the overview's ETTR and the recovery what-if, whose sliders only replay it)."""
    return ui.snapshot().on_trace(fn, since, until, *args, **kwargs)


def on_trace_soon(
    fn: Callable[..., Any],
    since: datetime | None,
    until: datetime | None,
    *args: Any,
    wait_s: float = 0.3,
    **kwargs: Any,
) -> tuple[bool, Any]:
    """``(True, on_trace(...))`` if it is ready within ``wait_s``; else ``(False, None)`` while
    it is computed in the background (a lazy panel shows a placeholder and looks again)."""
    snap = ui.snapshot()
    key = ("soon", trace_key(fn, since, until, args, kwargs))
    return _soon(snap, key, lambda: snap.on_trace(fn, since, until, *args, **kwargs), wait_s)


def warm(snap: Snapshot) -> None:
    """Compute the slow parts of every page's default view on ``snap`` (the overview first), then
    each page's view of each cluster (the first filter people pick)."""
    from faultlens.app.dashboard.views.recovery import defaults as recovery_defaults
    from faultlens.reports import first_screen, q_detail, q_fleet
    from faultlens.reports.filters import Filters, default_range

    lo, hi = snap.call(q_fleet.data_range)
    if lo is None or hi is None:
        return
    since, until = default_range(lo, hi)
    f = Filters(since=since, until=until)
    all_nodes = snap.call(q_fleet.node_list)
    first_screen.compute(snap)  # the overview's default view (the writer may have stored it)
    # each cluster's overview (the first filter people pick, on the page they open on)
    _warm_clusters(snap, f, all_nodes, first_screen.overview_of)
    snap.call(q_fleet.event_facets, since, until)
    snap.call(q_detail.lemons, until, n=None)
    _warm_filters(snap, f)
    snap.call(q_detail.calibration, f)
    snap.call(q_detail.detected_stragglers, None, since)
    strategies, kwargs = recovery_defaults(len(all_nodes))
    snap.on_trace(q_detail.whatif_on, since, until, strategies, **kwargs)
    _warm_clusters(snap, f, all_nodes, _warm_filters)


MAX_WARM_CLUSTERS = 8


def _warm_clusters(
    snap: Snapshot, f: Any, all_nodes: list[str], views: Callable[[Snapshot, Any], None]
) -> None:
    """``views(snap, f of one cluster)`` for each cluster (none past ``MAX_WARM_CLUSTERS``)."""
    from dataclasses import replace

    from faultlens.reports.filters import cluster_of, nodes_for

    clusters = sorted({cluster_of(n) for n in all_nodes})
    if len(clusters) > MAX_WARM_CLUSTERS:
        return
    try:
        for cluster in clusters:
            views(snap, replace(f, nodes=nodes_for(all_nodes, [cluster], [])))
    except Exception:  # the page computes (and reports) it when it is opened
        log.exception("warming the cluster views failed")


def _warm_filters(snap: Snapshot, f: Any) -> None:
    """What the overview, events, node, jobs and predictions pages show first for ``f``."""
    from faultlens.app.dashboard.views.events import PAGE_SIZE as EVENTS_PAGE
    from faultlens.app.dashboard.views.jobs import PAGE_SIZE as JOBS_PAGE
    from faultlens.reports import q_detail, q_fleet

    for fn in (q_fleet.jobs_lost, q_fleet.latest_predictions, q_fleet.top_xids, q_detail.taxonomy):
        snap.call(fn, f)
    snap.call(q_fleet.event_count, f, {}, None)
    snap.call(q_fleet.event_timeline, f, {}, None, by="kind")
    snap.call(q_fleet.event_page, f, {}, None, offset=0, limit=EVENTS_PAGE)
    snap.call(q_detail.failed_jobs, f, offset=0, limit=JOBS_PAGE)
    snap.call(q_fleet.latest_predictions, f, n=200)
    _warm_node(snap, f)


def _warm_node(snap: Snapshot, f: Any) -> None:
    """The node page's first view: the node it opens on, with its tables and charts."""
    from faultlens.reports import q_detail

    node = snap.call(q_detail.node_to_look_at, f)
    if node is None:
        return
    for fn in (
        q_detail.node_summary,
        q_detail.node_risk,
        q_detail.node_event_points,
        q_detail.node_outages,
        q_detail.node_jobs,
        q_detail.node_events,
    ):
        snap.call(fn, node, f)
    metrics = snap.call(q_detail.node_metrics, node)
    if metrics:
        snap.call(q_detail.node_telemetry, node, default_metric(metrics), f)


def default_metric(metrics: list[str]) -> str:
    """The telemetry metric the node page shows first: GPU temperature when there is one."""
    return TEMP if TEMP in metrics else metrics[0]


TEMP = "DCGM_FI_DEV_GPU_TEMP"

"""What a new snapshot computes before anyone asks: the overview's default view (its ETTR's
interruption trace included), then the overview of each cluster (the first filter people pick)
before the other pages' views."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from faultlens.app.dashboard import views
from faultlens.reports import q_fleet, q_state, reliability
from faultlens.reports.filters import Filters, cluster_of, default_range, nodes_for
from faultlens.reports.first_screen import OVERVIEW_INCIDENTS
from faultlens.reports.q_detail import interruption_trace
from faultlens.reports.snapshot import SnapshotReader, call_key
from tests.reports import smalldb


def test_each_clusters_overview_is_warmed_before_the_other_pages(tmp_path: Path) -> None:
    db = smalldb.build(tmp_path / "small.duckdb")
    reader = SnapshotReader(db, tmp_path / "snaps", published=False)
    try:
        snap = reader.refresh()
        order: list = []  # each result, when it was first asked for
        real = snap.call

        def call(fn, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
            key = call_key(fn, args, kwargs)
            if key not in order:
                order.append(key)
            return real(fn, *args, **kwargs)

        snap.call = call  # type: ignore[method-assign]
        views.warm(snap)
        lo, hi = snap.call(q_fleet.data_range)
        since, until = default_range(lo, hi)
        f = Filters(since=since, until=until)
        nodes = snap.call(q_fleet.node_list)
        trace = call_key(interruption_trace, (since, until), {})  # the overview's ETTR reads it
        facets = call_key(q_fleet.event_facets, (since, until), {})  # the events page's
        assert facets in order  # the other pages' views were warmed too
        clusters = sorted({cluster_of(n) for n in nodes})
        assert clusters == ["dgx-b", "gpu"]
        for cluster in clusters:
            fc = replace(f, nodes=nodes_for(nodes, [cluster], []))
            for key in (
                call_key(q_state.incidents, (fc,), {"limit": OVERVIEW_INCIDENTS}),
                call_key(reliability.window_rate, (fc,), {}),
                call_key(q_fleet.top_xids, (fc,), {}),
            ):
                assert key in order, key
                assert order.index(trace) < order.index(key) < order.index(facets), key
    finally:
        reader.close()

"""The dashboard's pages, one thin module each, and the one query cache they share.

``query(fn, *args)`` runs a ``reports`` query function on the current snapshot. Results are kept
per snapshot and arguments (the snapshot's memo, ``reports.snapshot.Memo``): a filter change that
returns to an earlier choice costs nothing, two sessions asking for the same result at once compute
it once, results are shared without being copied, and a new snapshot starts afresh. ``on_trace``
does the same for work on the range's interruption trace, which is read from the snapshot once.

``warm(snapshot)`` computes the slow results of every page's default view (the last 30 days, no
other filter) on a new snapshot before it is served, so a page's first render finds them ready.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from app.dashboard import ui
from reports.snapshot import Snapshot, freeze


def query(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return ui.snapshot().call(fn, *args, **kwargs)


def _on_trace(snap: Snapshot, fn: Callable[..., Any], since: datetime | None,
              until: datetime | None, *args: Any, **kwargs: Any) -> Any:
    from reports.q_detail import interruption_trace

    trace = snap.call(interruption_trace, since, until)
    key = ("trace", f"{fn.__module__}.{fn.__qualname__}", since, until, freeze(args),
           freeze(kwargs))
    return snap.memo.get(key, lambda: fn(trace, *args, **kwargs))


def on_trace(fn: Callable[..., Any], since: datetime | None, until: datetime | None,
             *args: Any, **kwargs: Any) -> Any:
    """``fn(trace, *args, **kwargs)`` on the range's interruption trace (``replay.from_db``,
    shared by the overview's ETTR and the recovery what-if, whose sliders only replay it)."""
    return _on_trace(ui.snapshot(), fn, since, until, *args, **kwargs)


def warm(snap: Snapshot) -> None:
    """Compute the slow parts of every page's default view on ``snap`` (the overview first)."""
    from app.dashboard.views.recovery import defaults as recovery_defaults
    from reports import q_detail, q_fleet, sections
    from reports.filters import Filters, default_range

    lo, hi = snap.call(q_fleet.data_range)
    if lo is None or hi is None:
        return
    since, until = default_range(lo, hi)
    f = Filters(since=since, until=until)
    snap.call(q_fleet.node_list)
    snap.call(q_fleet.episodes_in, since, until)
    _on_trace(snap, sections.ettr_of, since, until)
    snap.call(q_fleet.event_facets, since, until)
    snap.call(q_detail.lemons, until, n=None)
    snap.call(q_detail.calibration, f)
    snap.call(q_detail.detected_stragglers, None, since)
    strategies, kwargs = recovery_defaults(len(snap.call(q_fleet.node_list)))
    _on_trace(snap, q_detail.whatif_on, since, until, strategies, **kwargs)

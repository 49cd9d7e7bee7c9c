"""What every page shares: the database snapshot, the sidebar filters, small display helpers.

The dashboard never opens the live database (a writer would be blocked, or would block us): it
reads what the writers publish for readers, or a private copy where nothing is published
(``reports.snapshot``), refreshed whenever that changes; the sidebar says from when the data is.
"""

from __future__ import annotations

import json
import os
import threading
from datetime import date, datetime, time, timedelta
from pathlib import Path
from typing import Any

import streamlit as st

from faultlens.app.common import default_db_path
from faultlens.reports import q_fleet
from faultlens.reports.filters import Filters, cluster_of, default_days, nodes_for
from faultlens.reports.snapshot import Snapshot, SnapshotReader
from faultlens.reports.source_context import ROOTS_ENV, read_context


def vega(where: Any, chart: tuple[Any, dict[str, Any]], key: str, **kw: Any) -> Any:
    """An ``app.dashboard.vega*`` chart (``(data, spec)``) in ``where``, the chart's own look
    (``theme=None``) across its column: every page draws Vega-Lite, so a browser never loads
    plotly.js for the dashboard (the HTML report keeps plotly)."""
    data, spec = chart
    return where.vega_lite_chart(data, spec, key=key, theme=None, width="stretch", **kw)


@st.cache_resource(show_spinner=False)
def favicon() -> Any:
    """The page icon, drawn here and served by the dashboard itself: nothing is fetched from
    outside the machine (an emoji or material icon would be)."""
    from PIL import Image, ImageDraw

    img = Image.new("RGBA", (64, 64), (0, 0, 0, 0))
    draw = ImageDraw.Draw(img)
    draw.rounded_rectangle((2, 2, 62, 62), radius=12, fill=(31, 119, 180, 255))
    draw.line([(8, 36), (22, 36), (28, 16), (36, 50), (42, 30), (56, 30)], fill="white", width=5)
    return img


def db_path() -> Path:
    return default_db_path()


def models_dir() -> Path:
    env = os.environ.get("FAULTLENS_MODELS_DIR")
    return Path(env) if env else db_path().resolve().parent / "models"


@st.cache_resource(
    show_spinner="Opening the database's published view (or a copy of it) and its default "
    "views; later views are opened in the background."
)
def _reader(path: str) -> SnapshotReader:
    from faultlens.app.dashboard.views import warm

    # what the writers publish (no copy); ``FAULTLENS_READER=copy``: a private copy per write
    copy = os.environ.get("FAULTLENS_READER") == "copy"
    reader = SnapshotReader(path, warm=warm, published=not copy, warm_after=_first_run(path))
    reader.refresh()  # the first snapshot, under the spinner
    return reader


def open_reader() -> bool:
    """Open the reader (its first snapshot) before anyone asks: ``dashboard.serve`` calls it
    once the server has started, so the first visitor's page finds it open. False without a
    database (the page then says what to run)."""
    path = db_path()
    if not path.exists():
        return False
    _reader(str(path.resolve()))
    return True


@st.cache_resource(show_spinner=False)
def _first_run(path: str) -> threading.Event:
    """Set when the first page run is drawn: other pages' views are warmed after it."""
    return threading.Event()


def first_run_done() -> None:
    """The entry script's last step: the first page is drawn, warm the others now."""
    _first_run(str(db_path().resolve())).set()


def snapshot() -> Snapshot:
    """The current snapshot; stops the page if there is none.

    A changed database is copied (and rolled up) in the background while the previous snapshot
    keeps serving: a page never waits for a copy, except for the very first one."""
    path = db_path()
    reader = _reader(str(path.resolve()))
    snap = reader.refresh_in_background()
    if snap is None:
        st.info(
            f"No database at `{path}` yet. Run `faultlens demo` (a synthetic cluster) or "
            "`faultlens ingest PATH...` (your logs), then reload this page."
        )
        st.stop()
    return snap


def log_roots() -> tuple[Path, ...]:
    """The log folders source lines may be read from (``faultlens dashboard --logs / --config``,
    already resolved by the CLI)."""
    try:
        entries = json.loads(os.environ.get(ROOTS_ENV) or "[]")
    except ValueError:
        return ()
    return tuple(Path(e) for e in entries if isinstance(e, str) and e)


def source_context(file: str | None, line: int | None) -> None:
    """The lines around ``file:line`` from the log on disk (configured folders only), as text;
    operators only when roles are configured (``dashboard.auth``)."""
    from faultlens.app.dashboard.auth import current_viewer

    st.markdown("**Source context**")
    if not current_viewer().operator:
        st.info("Raw log lines are shown to operators only.")
        return
    st.code(f"{file}:{line}", language=None, wrap_lines=True)
    ctx = read_context(file, line, log_roots())
    if not ctx.ok:
        st.info(ctx.message)
        return
    shown = []
    for ln in ctx.lines:
        mark = ">" if ln.number == ctx.target else " "
        more = f" ... [{ln.cut_bytes:,} more bytes]" if ln.cut_bytes else ""
        shown.append(f"{mark}{ln.number:>8} | {ln.text}{more}")
    st.code("\n".join(shown), language=None)


def stop_if(condition: bool, message: str) -> None:
    """The one way a page reports a user-facing problem: a hint of what to run, then stop."""
    if condition:
        st.info(message)
        st.stop()


def _day_range(lo: datetime | None, hi: datetime | None) -> tuple[date, date]:
    if lo is None or hi is None:
        today = date(2025, 1, 1)
        return today, today
    return lo.date(), hi.date()


_WIDGETS = ("f_range", "f_cluster", "f_node", "f_gpu", "f_job")


def _restore() -> None:
    """Carry filter values across pages: widgets of another page start from the kept values."""
    for key in _WIDGETS:
        kept = st.session_state.get(f"keep_{key}")
        if key not in st.session_state and kept is not None:
            st.session_state[key] = kept


def _keep() -> None:
    for key in _WIDGETS:
        if key in st.session_state:
            st.session_state[f"keep_{key}"] = st.session_state[key]


def filters() -> Filters:
    """The filters of every page (time range, cluster, node, GPU, job) in the sidebar."""
    from faultlens.app.dashboard import urls
    from faultlens.app.dashboard.views import query

    snap = snapshot()
    lo, hi = query(q_fleet.data_range)
    all_nodes: list[str] = query(q_fleet.node_list)
    first, last = _day_range(lo, hi)
    urls.restore_from_url()  # a pasted link opens the view it names
    _restore()
    kept = st.session_state.get("f_range")
    if not kept or any(not first <= d <= last for d in kept):  # new or outside a new database
        st.session_state["f_range"] = default_days(lo, hi) if lo and hi else (first, last)
    with st.sidebar:
        st.caption(data_as_of(hi, snap.as_of))
        reader = _reader(str(db_path().resolve()))
        if reader.last_error:
            st.caption(f":orange[{reader.last_error}]")
        picked = st.date_input("Time range (UTC)", min_value=first, max_value=last, key="f_range")
        clusters = sorted({cluster_of(n) for n in all_nodes})
        chosen_clusters = st.multiselect("Cluster", clusters, key="f_cluster")
        options = [n for n in all_nodes if not chosen_clusters or cluster_of(n) in chosen_clusters]
        chosen_nodes = st.multiselect("Node", options, key="f_node")
        gpu = st.text_input("GPU (index or PCI bus id)", key="f_gpu").strip() or None
        job = st.text_input("Job id", key="f_job").strip() or None
    _keep()
    urls.write_to_url(picked)
    since, until = _range(picked, first, last)
    nodes = nodes_for(all_nodes, chosen_clusters, [n for n in chosen_nodes if n in options])
    if chosen_clusters and not nodes:
        nodes = ("\x00none",)  # a cluster with no node selects nothing, not everything
    return Filters(since=since, until=until, nodes=nodes, gpu=gpu, job_id=job)


def data_as_of(newest: datetime | None, snapshot_at: datetime) -> str:
    """The sidebar's freshness line: the data's own newest stamp, then when it was read."""
    newest_text = f"{newest:%Y-%m-%d %H:%M:%S} UTC" if newest else "no dated data"
    return (
        f"data as of {newest_text} (newest stamp) · snapshot {snapshot_at:%Y-%m-%d %H:%M} UTC"
        f" · `{db_path()}`"
    )


def _range(picked: Any, first: date, last: date) -> tuple[datetime, datetime]:
    if isinstance(picked, tuple | list):
        start = picked[0] if len(picked) > 0 else first
        end = picked[1] if len(picked) > 1 else start
    else:
        start = end = picked or first
    return datetime.combine(start, time()), datetime.combine(end + timedelta(days=1), time())


def paginate(total: int, key: str, page_size: int = 50) -> int:
    """A page picker under a table; returns the row offset."""
    pages = max(1, -(-total // page_size))
    col1, col2 = st.columns([1, 4])
    page = col1.number_input("page", min_value=1, max_value=pages, value=1, step=1, key=key)
    col2.caption(f"{total:,} rows · page {page} of {pages}")
    return (int(page) - 1) * page_size

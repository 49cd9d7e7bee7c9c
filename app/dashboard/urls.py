"""Every view's filters in the URL, so a link pasted into a ticket opens the same view.

The sidebar filters travel as ``from`` / ``to`` (UTC days), ``cluster`` and ``nodes``
(comma-separated), ``gpu`` and ``job``; the node page adds ``node`` and an evidence line as
``file`` + ``line``. A URL is read when a session first opens a page (it wins over nothing
else: filters already chosen in the session stay), and written back on every run.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime
from typing import Any
from urllib.parse import urlencode

import streamlit as st

from faultlens.reports.filters import Filters

LIST_SEP = ","
# sidebar widget key -> URL parameter
PARAMS = {"f_cluster": "cluster", "f_node": "nodes", "f_gpu": "gpu", "f_job": "job"}


def _day(text: str | None) -> date | None:
    try:
        return date.fromisoformat(text) if text else None
    except ValueError:
        return None


def range_from_url() -> tuple[date, date] | None:
    """``from`` / ``to`` of the URL as a day range, when both parse."""
    lo, hi = _day(st.query_params.get("from")), _day(st.query_params.get("to"))
    if lo is None or hi is None:
        return None
    return (lo, hi) if lo <= hi else (hi, lo)


def restore_from_url() -> None:
    """Widgets not yet set in this session start from the URL's values."""
    picked = range_from_url()
    if picked is not None and "f_range" not in st.session_state:
        st.session_state["f_range"] = picked
    for key, param in PARAMS.items():
        value = st.query_params.get(param)
        if value is None or key in st.session_state:
            continue
        if key in ("f_cluster", "f_node"):
            st.session_state[key] = [v for v in value.split(LIST_SEP) if v]
        else:
            st.session_state[key] = value


def write_to_url(picked: Any) -> None:
    """The current sidebar choices into the URL (empty ones removed)."""
    wanted: dict[str, str] = {}
    if isinstance(picked, tuple | list) and len(picked) == 2:
        wanted["from"], wanted["to"] = picked[0].isoformat(), picked[1].isoformat()
    for key, param in PARAMS.items():
        value = st.session_state.get(key)
        if isinstance(value, list):
            value = LIST_SEP.join(value)
        if value:
            wanted[param] = str(value)
    for param in ("from", "to", *PARAMS.values()):
        if param in wanted:
            if st.query_params.get(param) != wanted[param]:
                st.query_params[param] = wanted[param]
        elif param in st.query_params:
            del st.query_params[param]


def range_params(f: Filters) -> dict[str, str]:
    """``from`` / ``to`` of a filter's [since, until) range, as the URL carries them."""
    if f.since is None or f.until is None:
        return {}
    last = f.until.date() if f.until.time() != datetime.min.time() else None
    last = last or date.fromordinal(f.until.date().toordinal() - 1)
    return {"from": f.since.date().isoformat(), "to": last.isoformat()}


def link(page: str, params: Mapping[str, Any]) -> str:
    """A relative link to ``page`` (its url_path) with ``params`` (None values left out)."""
    query = urlencode({k: str(v) for k, v in params.items() if v not in (None, "")})
    return f"{page}?{query}" if query else page


def node_link(f: Filters, node: str | None, file: str | None = None, line: Any = None) -> str:
    """The node page of ``node`` for the same range, optionally on an evidence line."""
    return link("node", {**range_params(f), "node": node, "file": file, "line": line})

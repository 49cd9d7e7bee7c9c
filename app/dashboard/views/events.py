"""Events: the event explorer (timeline and table, facets, free-text search, the raw line)."""

from __future__ import annotations

import streamlit as st

from faultlens.app.dashboard import ui, urls, vega
from faultlens.app.dashboard.views import query
from faultlens.reports import q_fleet
from faultlens.reports.filters import Filters

PAGE_SIZE = 50


def render() -> None:
    st.title("Event explorer")
    explorer(ui.filters())


@st.fragment
def explorer(f: Filters) -> None:
    """Facets, search, timeline and table: changing them reruns this part of the page only."""
    facet_counts = query(q_fleet.event_facets, f.since, f.until)
    cols = st.columns([2, 2, 2, 2, 3])
    chosen: dict[str, list] = {}
    for col, name in zip(cols[:4], ("source", "kind", "code", "severity"), strict=True):
        options = facet_counts[name]["value"].to_list()
        chosen[name] = col.multiselect(
            name.capitalize() if name != "code" else "Xid code", options, key=f"ev_{name}"
        )
    search = cols[4].text_input("Search messages and files", key="ev_search").strip() or None
    facets = {k: tuple(v) for k, v in chosen.items() if v}
    by = st.radio("Timeline by", ("kind", "source", "severity"), horizontal=True, key="ev_by")
    total = query(q_fleet.event_count, f, facets, search)
    timeline = query(q_fleet.event_timeline, f, facets, search, by=by)
    ui.vega(st, vega.event_timeline(timeline), key="timeline")
    st.subheader(f"{total:,} events")
    offset = ui.paginate(total, "ev_page", PAGE_SIZE)
    page = query(q_fleet.event_page, f, facets, search, offset=offset, limit=PAGE_SIZE)
    picked = st.dataframe(
        page, hide_index=True, on_select="rerun", selection_mode="single-row", key="ev_table"
    )
    rows = picked.selection.rows if picked is not None else []
    if rows and rows[0] < page.height:
        row = page.row(rows[0], named=True)
        st.markdown("**Message**")
        st.code(row["message"] or "", language=None, wrap_lines=True)
        if row["node"]:
            st.markdown(
                f"[{row['node']}: node page at this line]"
                f"({urls.node_link(f, row['node'], row['file'], row['line'])})"
            )
        ui.source_context(row["file"], row["line"])
    else:
        st.caption("Select a row to see its message and the lines around it in its log file.")


if __name__ == "__main__":  # run by st.navigation as a page script
    render()

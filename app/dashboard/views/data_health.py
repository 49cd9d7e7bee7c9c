"""Data health: ingested files, lines parsed / noise / quarantined, the quarantine browser."""

from __future__ import annotations

import streamlit as st

from faultlens.app.dashboard import ui, vega_ops
from faultlens.app.dashboard.views import query
from faultlens.reports import q_fleet

PAGE_SIZE = 50


def render() -> None:
    st.title("Data health")
    ui.filters()  # shown for a consistent sidebar; ingest health is not time-filtered
    totals = query(q_fleet.ingest_totals)
    counts = query(q_fleet.table_counts)
    ui.stop_if(
        totals["files"] == 0 and counts["events"] == 0,
        "Nothing ingested yet: run `faultlens ingest PATH...` or `faultlens demo`.",
    )
    c = st.columns(5)
    c[0].metric("Files", f"{totals['files']:,}")
    c[1].metric("Lines", f"{totals['lines']:,}")
    c[2].metric("Parsed", f"{totals['parsed']:,}")
    c[3].metric("Noise", f"{totals['noise']:,}")
    c[4].metric("Quarantined", f"{totals['quarantined']:,}")
    st.caption("Rows per table: " + ", ".join(f"{k} {v:,}" for k, v in counts.items()))
    left, right = st.columns(2)
    ui.vega(left, vega_ops.ingest(query(q_fleet.ingest_by_format)), key="ingest")
    reasons = query(q_fleet.quarantine_reasons)
    ui.vega(right, vega_ops.quarantine_reasons(reasons), key="reasons")
    st.subheader("Ingested files")
    st.dataframe(query(q_fleet.ingested_files), hide_index=True)
    quarantine_browser(reasons["reason"].to_list())


@st.fragment
def quarantine_browser(reasons: list[str]) -> None:
    """Reason, search and page: changing them reruns this part of the page only."""
    st.subheader("Quarantine browser")
    cols = st.columns([2, 3])
    reason = cols[0].selectbox("Reason", ["(all)", *reasons], key="q_reason")
    search = cols[1].text_input("Search raw lines", key="q_search").strip() or None
    reason = None if reason == "(all)" else reason
    total, _ = query(q_fleet.quarantine_page, reason, search, limit=0)
    offset = ui.paginate(total, "q_page", PAGE_SIZE)
    _, page = query(q_fleet.quarantine_page, reason, search, offset=offset, limit=PAGE_SIZE)
    picked = st.dataframe(
        page, hide_index=True, on_select="rerun", selection_mode="single-row", key="q_table"
    )
    rows = picked.selection.rows if picked is not None else []
    if rows and rows[0] < page.height:
        row = page.row(rows[0], named=True)
        ui.source_context(row["file"], row["line"])
    else:
        st.caption("Select a row to see the lines around it in its log file.")


if __name__ == "__main__":  # run by st.navigation as a page script
    render()

"""Jobs: failed jobs with their attributed causes, and the taxonomy table (the Llama 3 shape)."""

from __future__ import annotations

import streamlit as st

from faultlens.app.dashboard import ui
from faultlens.app.dashboard.views import query
from faultlens.reports import figures, q_detail, q_fleet

PAGE_SIZE = 100


def render() -> None:
    st.title("Failed jobs")
    f = ui.filters()
    lost = query(q_fleet.jobs_lost, f)
    ui.stop_if(
        lost["jobs"] == 0,
        "No jobs in this range: ingest Slurm records (`faultlens "
        "ingest sacct.txt`) or widen the time range.",
    )
    c = st.columns(3)
    c[0].metric("Jobs in range", f"{lost['jobs']:,}")
    c[1].metric("Failed / NODE_FAIL / TIMEOUT", f"{lost['failed_jobs']:,}")
    c[2].metric("GPU-hours in failed jobs", f"{lost['gpu_hours_lost']:,.0f}")
    tax = query(q_detail.taxonomy, f)
    left, right = st.columns([3, 2])
    ui.chart(left, figures.fig_taxonomy(tax), key="taxonomy")
    with right:
        st.subheader("Taxonomy")
        if tax.height:
            st.dataframe(tax, hide_index=True)
        else:
            st.caption("No attributions: the ingest step attributes failed jobs to causes.")
    st.subheader("Failed jobs and their causes")
    offset = ui.paginate(lost["failed_jobs"], "jobs_page", PAGE_SIZE)
    st.dataframe(query(q_detail.failed_jobs, f, offset=offset, limit=PAGE_SIZE), hide_index=True)


if __name__ == "__main__":  # run by st.navigation as a page script
    render()

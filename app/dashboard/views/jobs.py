"""Jobs: failed jobs with their attributed causes, one job's deciding evidence, and the taxonomy
table (the Llama 3 shape)."""

from __future__ import annotations

import polars as pl
import streamlit as st

from faultlens.app.dashboard import panels, ui, urls, vega_ops
from faultlens.app.dashboard.views import query
from faultlens.reports import q_detail, q_fleet
from faultlens.reports.filters import Filters

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
    if f.job_id:
        attribution(f, f.job_id)
    tax = query(q_detail.taxonomy, f)
    left, right = st.columns([3, 2])
    ui.vega(left, vega_ops.taxonomy(tax), key="taxonomy")
    with right:
        st.subheader("Taxonomy")
        if tax.height:
            st.dataframe(tax, hide_index=True)
        else:
            st.caption("No attributions: the ingest step attributes failed jobs to causes.")
    st.subheader("Failed jobs and their causes")
    st.caption("Select a row to see the events that decided its cause.")
    offset = ui.paginate(lost["failed_jobs"], "jobs_page", PAGE_SIZE)
    page = query(q_detail.failed_jobs, f, offset=offset, limit=PAGE_SIZE)
    picked = st.dataframe(
        with_links(f, page),
        hide_index=True,
        on_select="rerun",
        selection_mode="single-row",
        key="jobs_table",
        column_config={
            "node_page": st.column_config.LinkColumn("node page", display_text=r"node=([^&]+)")
        },
    )
    rows = picked.selection.rows if picked is not None else []
    if rows and rows[0] < page.height and not f.job_id:
        attribution(f, page["job_id"][rows[0]])


def with_links(f: Filters, page: pl.DataFrame) -> pl.DataFrame:
    """The failed jobs with a link to the blamed node's page."""
    links = [urls.node_link(f, n) if n else None for n in page["blamed_node"].to_list()]
    return page.with_columns(pl.Series("node_page", links, pl.String))


def attribution(f: Filters, job_id: str) -> None:
    """One job's attributed cause and the events that decided it, with their log lines."""
    job = query(q_detail.job_attribution, job_id)
    st.subheader(f"Job {job_id}: why it failed")
    if job is None:
        st.info(f"No job {job_id} in the database.")
        return
    cause = job.get("cause") or "not attributed"
    blamed = job.get("blamed_node")
    where = f" on [{blamed}]({urls.node_link(f, blamed)})" if blamed else ""
    st.markdown(
        f"**{job['state']}** at {job['end']:%Y-%m-%d %H:%M:%S} · cause **{cause}**{where}"
        f" · deciding event `{job.get('evidence_kind') or '-'}`"
        + (f" Xid {job['evidence_code']}" if job.get("evidence_code") is not None else "")
    )
    evidence = query(q_detail.job_evidence, job)
    if evidence.height == 0:
        st.caption("No warning-or-worse event on the job's nodes around its end.")
        return
    lines = [
        f"- {'**deciding** · ' if r['deciding'] else ''}{r['ts']:%Y-%m-%d %H:%M:%S} "
        f"{panels.md_text(r['node'])} `{r['kind']}` {panels.md_text(r['message'] or '')[:160]} · "
        f"[{panels.md_text(str(r['file']).rsplit('/', 1)[-1])}:{r['line']}]"
        f"({urls.node_link(f, r['node'], r['file'], r['line'])})"
        for r in evidence.iter_rows(named=True)
    ]
    st.markdown("\n".join(lines))


if __name__ == "__main__":  # run by st.navigation as a page script
    render()

"""Stragglers: slow GPUs and nodes, their causes, and the GPU-hours they wasted."""

from __future__ import annotations

import streamlit as st

from faultlens.app.dashboard import ui
from faultlens.app.dashboard.views import query
from faultlens.reports import figures, q_detail


def render() -> None:
    st.title("Stragglers")
    f = ui.filters()
    # detection runs once per snapshot, job and start; the other filters select from its result
    found, jobs = q_detail.select_stragglers(
        *query(q_detail.detected_stragglers, f.job_id, f.since), f
    )
    ui.stop_if(
        found.height == 0 and jobs.height == 0,
        "No stragglers in this range. Straggler detection needs jobs (Slurm) and per-GPU "
        "telemetry (DCGM): ingest both, or widen the time range.",
    )
    c = st.columns(3)
    c[0].metric("Stragglers", f"{found.height:,}")
    c[1].metric("Jobs slowed", f"{found['job_id'].n_unique() if found.height else 0:,}")
    c[2].metric("GPU-hours wasted", f"{float(found['wasted_gpu_h'].sum() or 0):,.1f}")
    left, right = st.columns(2)
    ui.chart(left, figures.fig_straggler_causes(found), key="causes")
    ui.chart(right, figures.fig_straggler_slowdown(found), key="slowdown")
    st.subheader("Slow GPUs and nodes (worst first)")
    st.dataframe(found, hide_index=True)
    st.subheader("Cost per job")
    st.dataframe(jobs, hide_index=True)


if __name__ == "__main__":  # run by st.navigation as a page script
    render()

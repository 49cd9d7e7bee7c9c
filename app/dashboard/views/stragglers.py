"""Stragglers: slow GPUs and nodes, their causes, and the GPU-hours they wasted."""

from __future__ import annotations

import streamlit as st

from faultlens.app.dashboard import ui, vega_models
from faultlens.app.dashboard.views import query
from faultlens.reports import q_detail
from faultlens.reports import straggler_forecast as sf
from faultlens.reports.filters import Filters


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
    ui.vega(left, vega_models.straggler_causes(found), key="causes")
    ui.vega(right, vega_models.straggler_slowdown(found), key="slowdown")
    st.subheader("Slow GPUs and nodes (worst first)")
    st.dataframe(found, hide_index=True)
    st.subheader("Cost per job")
    st.dataframe(jobs, hide_index=True)
    forecast_panel(f)


def forecast_panel(f: Filters) -> None:
    """The straggler predictor: GPUs likely to straggle in their next window, and its test-split
    quality beside the "straggled in the previous window" baseline."""
    st.subheader("Next window: straggler predictor")
    # the forecast runs once per snapshot, job and start; the node filter selects from it
    fc = query(sf.straggler_forecast, Filters(since=f.since, job_id=f.job_id))
    if fc.note:
        st.info(fc.note)
        return
    if f.nodes:
        fc = sf.narrowed(fc, f.nodes)
    c = st.columns(len(sf.numbers(fc)))
    for col, (label, value) in zip(c, sf.numbers(fc), strict=True):
        col.metric(label, value)
    ui.vega(st, vega_models.straggler_forecast(fc.next), key="forecast")
    st.caption(
        f"Test split {fc.test_window[0]} to {fc.test_window[1]} ({fc.positives_test} "
        "straggling windows); the baseline says a GPU straggles next if it straggles now."
    )
    st.dataframe(fc.metrics, hide_index=True, key="forecast_metrics")
    st.dataframe(fc.next.head(sf.TOP_N), hide_index=True, key="forecast_next")


if __name__ == "__main__":  # run by st.navigation as a page script
    render()

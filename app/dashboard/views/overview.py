"""Overview: fleet health at a glance."""

from __future__ import annotations

import streamlit as st

from faultlens.app.dashboard import ui
from faultlens.app.dashboard.views import on_trace, query
from faultlens.reports import figures, q_fleet, sections


def render() -> None:
    st.title("Fleet overview")
    f = ui.filters()
    all_nodes = query(q_fleet.node_list)
    n_nodes = ui.fleet_size(f, all_nodes)
    episodes = q_fleet.select_episodes(query(q_fleet.episodes_in, f.since, f.until), f)
    node_days = f.node_days(len(all_nodes))
    lost = query(q_fleet.jobs_lost, f)
    at_risk = query(q_fleet.latest_predictions, f)
    ettr = on_trace(sections.ettr_of, f.since, f.until)
    c = st.columns(5)
    per_1000 = episodes.height * 1000.0 / node_days if node_days else 0.0
    c[0].metric(
        "Failures / 1000 node-days",
        f"{per_1000:.2f}",
        help=f"{episodes.height} hardware failure episodes over {node_days:,.0f} node-days",
    )
    c[1].metric(
        "MTBF per node",
        f"{node_days * 24 / episodes.height:,.0f} h" if episodes.height else "no failures",
    )
    c[2].metric(
        "ETTR (checkpoint every 30 min)",
        f"{ettr:.3f}" if ettr is not None else "-",
        help="Effective training time ratio of a fleet-wide job replayed on this range",
    )
    c[3].metric(
        "Jobs lost",
        f"{lost['failed_jobs']:,}",
        help=f"{lost['gpu_hours_lost']:,.0f} GPU-hours of runtime in failed jobs",
    )
    c[4].metric(
        "Nodes at risk now",
        f"{sections.count_at_risk(at_risk)}",
        help="latest prediction run, score >= 0.5",
    )
    left, right = st.columns(2)
    ui.chart(
        left, figures.fig_failure_trend(q_fleet.failure_trend(episodes, f, n_nodes)), key="trend"
    )
    ui.chart(right, figures.fig_mtbf(q_fleet.mtbf_by_component(episodes, node_days)), key="mtbf")
    left, right = st.columns(2)
    ui.chart(left, figures.fig_top_xids(query(q_fleet.top_xids, f)), key="xids")
    # the table, not a chart of it, and the interruption taxonomy on the Jobs page only: fewer
    # elements for the browser to redraw on every filter change
    if at_risk.height:
        right.markdown("**At risk now** (latest prediction run)")
        right.dataframe(sections.risk_table(at_risk.head(20)), hide_index=True)
    else:
        right.caption("No predictions: run `faultlens predict`.")


if __name__ == "__main__":  # run by st.navigation as a page script
    render()

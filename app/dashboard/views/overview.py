"""Overview: what needs a human now (fleet state, open incidents), then fleet health numbers."""

from __future__ import annotations

import polars as pl
import streamlit as st

from faultlens.app.dashboard import panels, ui, urls, vega
from faultlens.app.dashboard.views import on_trace_soon, query
from faultlens.reports import first_screen, q_fleet, q_state, reliability, sections
from faultlens.reports.filters import Filters

INCIDENTS = first_screen.OVERVIEW_INCIDENTS  # what the writer computes ahead (first_screen)


def render() -> None:
    st.title("Fleet overview")
    f = ui.filters()
    span = panels.span_banner(f)
    all_nodes = query(q_fleet.node_list)
    fleet_now(f, all_nodes)
    numbers(f, all_nodes)
    panels.unplaced_panel(span)


def fleet_now(f: Filters, all_nodes: list[str]) -> None:
    """The grid of nodes by state (a click opens the node) beside the open incidents."""
    # the whole fleet's state once per range (warmed, and shared by every node filter), then
    # the selected nodes of it
    state = query(q_state.fleet_state, Filters(since=f.since, until=f.until), all_nodes)
    if f.nodes:
        state = state.filter(pl.col("node").is_in(list(f.nodes)))
    counts = q_state.state_counts(state)
    st.caption(
        " · ".join(f"**{n:,}** {s}" for s, n in counts.items())
        + " · hover a square for its GPUs, click it to open the node"
    )
    left, right = st.columns([1, 1])
    data, spec = vega.fleet_grid(state)
    squares = data is not None  # an empty fleet is a text chart, nothing to click
    left.vega_lite_chart(
        data,
        spec,
        key="fleet_grid",
        width="content",
        theme=None,
        on_select=_picked_node if squares else "ignore",
        selection_mode=vega.PICK if squares else None,
    )
    node = st.session_state.pop("goto_node", None)
    if node:
        st.switch_page("views/node.py", query_params={**urls.range_params(f), "node": node})
    incidents = query(q_state.incidents, f, limit=INCIDENTS)
    with right:
        st.markdown("**Open incidents** (one row per node or job; newest first)")
        if incidents.height:
            st.markdown(panels.incidents_table(f, incidents))
        else:
            st.caption("No error or critical event in this range.")


def _picked_node() -> None:
    """A click on a square: open that node's page (on the next run, outside the callback)."""
    picked = (st.session_state.get("fleet_grid") or {}).get("selection", {}).get(vega.PICK) or []
    node = picked[0].get("node") if picked else None
    if node:
        st.session_state["goto_node"] = node


def numbers(f: Filters, all_nodes: list[str]) -> None:
    """Failure rate, MTBF, ETTR, jobs lost, nodes at risk; the trend charts; top Xids."""
    episodes = q_fleet.select_episodes(query(q_fleet.episodes_in, f.since, f.until), f)
    rate = query(reliability.window_rate, f)
    node_days = rate.node_days
    lost = query(q_fleet.jobs_lost, f)
    at_risk = query(q_fleet.latest_predictions, f)
    c = st.columns(5)
    c[0].metric(
        "Failures / 1000 node-days",
        reliability.rate_text(rate),
        help=f"{rate.n_failures} failures over {node_days:,.0f} node-days; {rate.fleet.note}",
    )
    c[1].metric(
        "MTBF per node",
        f"{rate.mtbf_h:,.0f} h" if rate.n_failures else "no failures",
    )
    with c[2]:
        ettr_metric(f)
    c[3].metric(
        "Jobs lost",
        f"{lost['failed_jobs']:,}",
        help=f"{lost['gpu_hours_lost']:,.0f} GPU-hours of runtime in failed jobs",
    )
    c[4].metric(
        "Nodes at risk now",
        f"{sections.count_at_risk(at_risk)}",
        help=f"latest prediction run, score >= {q_state.WATCH_THRESHOLD}",
    )
    left, right = st.columns(2)
    ui.vega(
        left,
        vega.failure_trend(q_fleet.failure_trend(rate.failures, f, rate.fleet.nodes)),
        key="trend",
    )
    ui.vega(right, vega.mtbf(q_fleet.mtbf_by_component(episodes, node_days)), key="mtbf")
    left, right = st.columns(2)
    ui.vega(left, vega.top_xids(query(q_fleet.top_xids, f)), key="xids")
    at_risk_table(right, f, at_risk)


ETTR_LABEL = "ETTR (checkpoint every 30 min)"
ETTR_HELP = "Effective training time ratio of a fleet-wide job replayed on this range"


def ettr_metric(f: Filters) -> None:
    """The ETTR of the range, a lazy panel: its replay reads the interruption trace, which on a
    large history takes a few seconds; the rest of the page does not wait for it."""
    ready, ettr = on_trace_soon(sections.ettr_of, f.since, f.until)
    if ready:
        st.metric(ETTR_LABEL, f"{ettr:.3f}" if ettr is not None else "-", help=ETTR_HELP)
    else:
        _ettr_pending(f)


@st.fragment(run_every=1.0)
def _ettr_pending(f: Filters) -> None:
    """Looks again every second; once the ETTR is ready, the page runs again to show it (and
    this timer is not drawn again)."""
    if on_trace_soon(sections.ettr_of, f.since, f.until, wait_s=0.0)[0]:
        st.rerun()
    st.metric(ETTR_LABEL, "computing…", help=ETTR_HELP + " (being computed)")


def at_risk_table(where, f: Filters, at_risk) -> None:  # noqa: ANN001
    """Only the nodes above the watch threshold, each linking to its node page."""
    if at_risk.height == 0:
        where.caption("No predictions: run `faultlens predict`.")
        return
    above = sections.above_watch(at_risk)
    where.markdown(f"**At risk now** (latest prediction run, score >= {q_state.WATCH_THRESHOLD})")
    if above.height == 0:
        top = at_risk.row(0, named=True)
        where.caption(
            f"No node above the watch threshold; highest: {top['node']} at {top['score']:.2f}."
        )
        return
    lines = [
        f"- [{r['node']}]({urls.node_link(f, r['node'])}) **{r['score']:.2f}** · "
        f"`{r.get('action') or '-'}` · {panels.md_text(r.get('reasons') or '')}"
        for r in sections.risk_table(above).head(20).iter_rows(named=True)
    ]
    where.markdown("\n".join(lines))


if __name__ == "__main__":  # run by st.navigation as a page script
    render()

"""Node: one node's life: events, telemetry, jobs, drains, risk with reasons, lemon evidence."""

from __future__ import annotations

import polars as pl
import streamlit as st

from faultlens.app.dashboard import panels, ui, vega
from faultlens.app.dashboard.views import TEMP, default_metric, query
from faultlens.reports import q_detail, q_fleet, sections
from faultlens.reports.filters import Filters


def render() -> None:
    st.title("Node")
    f = ui.filters()
    all_nodes = query(q_fleet.node_list)
    ui.stop_if(not all_nodes, "No nodes in the database yet: run `faultlens ingest` first.")
    node_view(f, all_nodes)


@st.fragment
def node_view(f: Filters, all_nodes: list[str]) -> None:
    """Everything below the filters: picking a node or a metric reruns this part only."""
    options = list(f.nodes) if f.nodes and f.nodes[0] in all_nodes else all_nodes
    # the node the URL names; else (none, or one the filters leave out) the one of the
    # selection most worth a look, as the page opens (warmed for each cluster)
    default = st.query_params.get("node")
    if default not in options:
        default = query(q_detail.node_to_look_at, f)
    index = options.index(default) if default in options else 0
    node = st.selectbox("Node", options, index=index, key="node_pick")
    if node != st.query_params.get("node"):  # the URL names the node shown (a pasteable link)
        st.query_params["node"] = node
        for stale in ("file", "line"):  # an evidence line of another node
            st.query_params.pop(stale, None)
    panels.evidence()
    summary = query(q_detail.node_summary, node, f)
    risk = query(q_detail.node_risk, node, f)
    lemon = q_detail.lemon_of(query(q_detail.lemons, f.until, n=None), node) if f.until else None
    c = st.columns(4)
    c[0].metric("Events in range", f"{int(summary['events'].sum() or 0):,}")
    bad = summary.filter(summary["severity"].is_in(["error", "critical"]))["events"].sum()
    c[1].metric("Errors / critical", f"{int(bad or 0):,}")
    c[2].metric(
        "Risk score",
        f"{risk['score'][0]:.2f}" if risk.height else "-",
        help="newest prediction run for this node",
    )
    c[3].metric(
        "Lemon",
        ("yes" if lemon["flagged"] else "no") if lemon else "-",
        help="models.lemons over the 28 days before the range's end",
    )
    events = query(q_detail.node_event_points, node, f)
    ui.vega(st, vega.node_events(events, f.since, f.until), key="node_events")
    metrics = query(q_detail.node_metrics, node)
    metric = st.selectbox(
        "Telemetry metric",
        metrics,
        index=metrics.index(default_metric(metrics)) if metrics else None,
        key="node_m",
        disabled=not metrics,
        placeholder="no telemetry for this node",
    )
    # a node without telemetry keeps the chart, empty (the next node's lines then only swap its
    # data in the browser, instead of a chart built anew on each change between the two)
    tel = query(q_detail.node_telemetry, node, metric, f) if metric else pl.DataFrame()
    ui.vega(st, vega.telemetry(tel, metric or TEMP), key="node_tel")
    if tel.height:
        lo, hi = tel["ts"].min(), tel["ts"].max()
        st.caption(f"samples from {lo:%Y-%m-%d %H:%M} to {hi:%Y-%m-%d %H:%M} UTC")
    elif metrics:
        st.caption(f"No {metric} samples for this node in this range.")
    else:
        st.caption("No telemetry for this node.")
    left, right = st.columns(2)
    left.markdown(_risk_and_lemon(risk, lemon))  # one element: fewer to redraw on each change
    with right:
        st.subheader("Drains and outages")
        st.dataframe(query(q_detail.node_outages, node, f), hide_index=True)
    st.subheader("Jobs on this node")
    st.dataframe(query(q_detail.node_jobs, node, f), hide_index=True)
    st.subheader("Warnings and errors")
    st.dataframe(query(q_detail.node_events, node, f), hide_index=True)


def _risk_and_lemon(risk: pl.DataFrame, lemon: dict | None) -> str:
    """The node's risk rows with their reasons and its lemon evidence, as one markdown block."""
    lines = ["#### Risk and reasons"]
    if risk.height:
        for r in sections.risk_table(risk).iter_rows(named=True):
            gpu = f" gpu {r['gpu']}" if r.get("gpu") not in (None, "") else ""
            lines.append(
                f"- **{r['score']:.3f}**{gpu} · action `{r.get('action') or '-'}` · "
                f"`{r.get('reasons') or 'no reasons'}`"
            )
    else:
        lines.append("No prediction for this node: run `faultlens predict`.")
    lines.append("#### Lemon evidence")
    evidence = lemon.get("evidence") if lemon else None
    lines.append(f"`{evidence}`" if evidence else "No lemon signal.")
    return "\n".join(lines)


if __name__ == "__main__":  # run by st.navigation as a page script
    render()

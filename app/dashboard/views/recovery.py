"""Recovery what-if: replay the range's interruptions under each strategy, live."""

from __future__ import annotations

from typing import Any

import streamlit as st

from faultlens.app.dashboard import ui, vega_ops
from faultlens.app.dashboard.views import on_trace, query
from faultlens.replay import ALL_STRATEGIES
from faultlens.reports import q_detail, q_fleet
from faultlens.reports.filters import Filters

DEFAULT = ("checkpoint", "young-daly", "in-memory", "hot-spares", "elastic")
RESAMPLES = 8  # block-bootstrap resamples behind the ETTR interval: a live view, not a report


def defaults(n_nodes: int) -> tuple[tuple[str, ...], dict[str, Any]]:
    """The strategies and job of the page's first view (what ``views.warm`` computes ahead)."""
    return DEFAULT, {
        "interval_min": 30.0,
        "spares": max(1, n_nodes // 64),
        "job_gpus": max(8, n_nodes * 8),
        "resamples": RESAMPLES,
    }


def render() -> None:
    st.title("Recovery what-if")
    st.caption(
        "Replays the whole fleet's interruptions in the time range; node filters do "
        "not apply (the job spans the fleet)."
    )
    f = ui.filters()
    n_nodes = len(query(q_fleet.node_list))
    ui.stop_if(n_nodes == 0, "No nodes in the database yet: run `faultlens demo` first.")
    what_if(f, n_nodes)


@st.fragment
def what_if(f: Filters, n_nodes: int) -> None:
    """The sliders and the ranking: moving a slider reruns this part of the page only."""
    _, start = defaults(n_nodes)
    c = st.columns(3)
    interval = c[0].slider("Checkpoint interval (min)", 5, 240, 30, step=5, key="rw_interval")
    spares = c[1].slider(
        "Hot spare nodes", 0, max(8, n_nodes // 4), start["spares"], key="rw_spares"
    )
    max_gpus = start["job_gpus"]
    gpus = c[2].slider("Job size (GPUs)", 8, max_gpus, max_gpus, step=8, key="rw_gpus")
    strategies = st.multiselect("Strategies", list(ALL_STRATEGIES), list(DEFAULT), key="rw_s")
    if not strategies:
        st.info("Pick at least one strategy.")
        return
    scores = on_trace(
        q_detail.whatif_on,
        f.since,
        f.until,
        tuple(strategies),
        interval_min=float(interval),
        spares=int(spares),
        job_gpus=int(gpus),
        resamples=RESAMPLES,
    )
    if not scores:
        st.info("No interruptions in this range to replay: widen the time range.")
        return
    frame = q_detail.scores_frame(scores)
    best = frame.row(0, named=True)
    st.success(
        f"Best: **{best['strategy']}** — ETTR {best['ettr']:.4f}, "
        f"${best['cost_usd']:,.0f} lost over {scores[0].interruptions} interruptions "
        f"({scores[0].window_h:,.0f} h, {scores[0].gpus:,} GPUs)"
    )
    left, right = st.columns(2)
    ui.vega(left, vega_ops.strategy_ranking(frame), key="ranking")
    ui.vega(right, vega_ops.badput(frame), key="badput")
    st.subheader("Ranking (fewest dollars lost first)")
    st.caption(f"ETTR interval: {RESAMPLES} block-bootstrap resamples of the trace.")
    st.dataframe(frame, hide_index=True)


if __name__ == "__main__":  # run by st.navigation as a page script
    render()

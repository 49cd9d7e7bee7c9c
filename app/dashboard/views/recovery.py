"""Recovery what-if: replay the range's interruptions under each strategy, live."""

from __future__ import annotations

import streamlit as st

from app.dashboard import ui
from app.dashboard.views import query
from replay import ALL_STRATEGIES
from reports import figures, q_detail, q_fleet

DEFAULT = ("checkpoint", "young-daly", "in-memory", "hot-spares", "elastic")


def render() -> None:
    st.title("Recovery what-if")
    st.caption("Replays the whole fleet's interruptions in the time range; node filters do "
               "not apply (the job spans the fleet).")
    f = ui.filters()
    n_nodes = len(query(q_fleet.node_list))
    ui.stop_if(n_nodes == 0, "No nodes in the database yet: run `faultlens demo` first.")
    c = st.columns(3)
    interval = c[0].slider("Checkpoint interval (min)", 5, 240, 30, step=5, key="rw_interval")
    spares = c[1].slider("Hot spare nodes", 0, max(8, n_nodes // 4), max(1, n_nodes // 64),
                         key="rw_spares")
    max_gpus = max(8, n_nodes * 8)
    gpus = c[2].slider("Job size (GPUs)", 8, max_gpus, max_gpus, step=8, key="rw_gpus")
    strategies = st.multiselect("Strategies", list(ALL_STRATEGIES), list(DEFAULT), key="rw_s")
    ui.stop_if(not strategies, "Pick at least one strategy.")
    scores = query(q_detail.whatif, f.since, f.until, tuple(strategies),
                   interval_min=float(interval),
                   spares=int(spares), job_gpus=int(gpus))
    ui.stop_if(not scores, "No interruptions in this range to replay: widen the time range.")
    frame = q_detail.scores_frame(scores)
    best = frame.row(0, named=True)
    st.success(f"Best: **{best['strategy']}** — ETTR {best['ettr']:.4f}, "
               f"${best['cost_usd']:,.0f} lost over {scores[0].interruptions} interruptions "
               f"({scores[0].window_h:,.0f} h, {scores[0].gpus:,} GPUs)")
    left, right = st.columns(2)
    left.plotly_chart(figures.fig_strategy_ranking(frame), key="ranking")
    right.plotly_chart(figures.fig_badput(frame), key="badput")
    st.subheader("Ranking (fewest dollars lost first)")
    st.dataframe(frame, hide_index=True)


if __name__ == "__main__":  # run by st.navigation as a page script
    render()

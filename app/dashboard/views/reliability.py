"""Reliability: failure rate, MTBF / MTTR by category, Weibull, repairs, lemons, survival."""

from __future__ import annotations

import streamlit as st

from faultlens.app.dashboard import ui, vega_reliability
from faultlens.app.dashboard.views import query
from faultlens.reports import reliability as R


def render() -> None:
    st.title("Reliability")
    names = query(R.datasets)
    dataset = st.selectbox("Dataset", names, index=0, key="rel_dataset")
    view = query(R.reliability_view, dataset)
    ui.stop_if(
        not view.doc or view.empty,
        f"No failures in dataset {dataset!r}. Ingest failure records or logs "
        "(`faultlens ingest FILE --dataset NAME`), or pick another dataset.",
    )
    fleet = view.doc["fleet"]
    lo, hi = view.doc["window"]
    st.caption(f"data from {lo[:10]} to {hi[:10]}; {fleet['note']}")
    numbers = R.numbers_of(view.doc)
    for col, (label, value) in zip(st.columns(len(numbers)), numbers, strict=True):
        col.metric(label, value)
    charts = vega_reliability.charts_of(view)
    for i in range(0, len(charts), 2):
        cols = st.columns(2)
        for j, chart in enumerate(charts[i : i + 2]):
            ui.vega(cols[j], chart, key=f"rel{i + j}")
    st.subheader("By category and component")
    st.dataframe(R.category_table(view.doc), hide_index=True)


if __name__ == "__main__":  # run by st.navigation as a page script
    render()

"""Predictions: at-risk nodes and GPUs, the model card, model vs baselines, calibration."""

from __future__ import annotations

import polars as pl
import streamlit as st

from faultlens.app.dashboard import ui, urls, vega_models
from faultlens.app.dashboard.views import query
from faultlens.reports import q_detail, q_fleet, sections
from faultlens.reports.filters import Filters


def render() -> None:
    st.title("Predictions")
    f = ui.filters()
    at_risk = query(q_fleet.latest_predictions, f, n=200)
    made_by = at_risk["model_version"][0] if at_risk.height else None
    card = q_detail.model_card(ui.models_dir(), made_by)  # the card of the model shown
    ui.stop_if(
        card is None and at_risk.height == 0,
        f"No trained model in `{ui.models_dir()}` and no predictions: run "
        "`faultlens train` then `faultlens predict`.",
    )
    if at_risk.height:
        st.caption(
            f"Run of {at_risk['made_at'][0]:%Y-%m-%d %H:%M} UTC, model "
            f"{made_by}, horizon {at_risk['horizon'][0]:g} h"
        )
    if card is not None and made_by and card.get("model_version") != made_by:
        st.warning(
            f"The predictions shown were made by model {made_by}, whose card is not in "
            f"`{ui.models_dir()}`; the card below is of model {card.get('model_version')} "
            "(LATEST). Run `faultlens predict` to score with it."
        )
    left, right = st.columns(2)
    ui.vega(left, vega_models.at_risk(at_risk), key="risk")
    fleet = Filters(since=f.since, until=f.until)  # calibration is fleet-wide: one result per range
    ui.vega(right, vega_models.calibration(query(q_detail.calibration, fleet)), key="calib")
    st.subheader("At-risk nodes and GPUs")
    table = sections.risk_table(at_risk)
    if table.height:
        links = [urls.node_link(f, n) for n in table["node"].to_list()]
        table = table.with_columns(pl.Series("node_page", links, pl.String))
    st.dataframe(
        table,
        hide_index=True,
        column_config={
            "node_page": st.column_config.LinkColumn("node page", display_text=r"node=([^&]+)")
        },
    )
    if card is None:
        st.info("No model card: run `faultlens train` to see the model against its baselines.")
        return
    st.subheader(f"Model card: {card.get('model_version', '?')}")
    note = q_detail.threshold_note(card)
    if note:
        st.caption(note[0].upper() + note[1:] + ".")
    ui.vega(st, vega_models.model_vs_baselines(q_detail.baseline_metrics(card)), key="base")
    st.dataframe(q_detail.baseline_metrics(card), hide_index=True)
    with st.expander("Model card (JSON)"):
        st.json(card, expanded=False)


if __name__ == "__main__":  # run by st.navigation as a page script
    render()
